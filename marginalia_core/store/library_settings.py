"""The ``library_settings`` table (migration m010 / p003): the retrieval settings "Apply to
Chat" saved for one library, behind store methods both backends inherit (portable SQL)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from marginalia_core.store.rows import now_iso


class LibrarySettingsTable:
    """Mixed into ``Store`` and ``PostgresStore``; needs their ``conn`` and ``write()``."""

    @property
    def conn(self) -> Any:
        raise NotImplementedError

    def write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def library_settings(self) -> dict[str, Any]:
        """The settings applied to this library, by name (empty: the defaults)."""
        return {
            r["key"]: json.loads(r["value"])
            for r in self.conn.execute("SELECT key, value FROM library_settings ORDER BY key")
        }

    def save_library_settings(self, values: dict[str, Any]) -> None:
        """Replace the applied settings with ``values`` in one transaction (a ``None`` value is
        left out: that setting falls back to its default)."""
        with self.write() as conn:
            conn.execute("DELETE FROM library_settings")
            conn.executemany(
                "INSERT INTO library_settings (key, value, updated) VALUES (?, ?, ?)",
                [(k, json.dumps(v), now_iso()) for k, v in values.items() if v is not None],
            )
