"""The ``library_settings`` table (migration m010 / p003): the retrieval settings "Apply to
Chat" saved for one library, behind store methods both backends inherit (portable SQL)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from marginalia_core.store.rows import now_iso

OWN_KEYS = ("local_model",)  # library values of other concerns (the sidebar's local model server)


class LibrarySettingsTable:
    """Mixed into ``Store`` and ``PostgresStore``; needs their ``conn`` and ``write()``."""

    @property
    def conn(self) -> Any:
        raise NotImplementedError

    def write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def library_settings(self) -> dict[str, Any]:
        """Every value saved for this library, by name (empty: the defaults)."""
        return {
            r["key"]: json.loads(r["value"])
            for r in self.conn.execute("SELECT key, value FROM library_settings ORDER BY key")
        }

    def save_library_settings(self, values: dict[str, Any]) -> None:
        """Replace the applied settings with ``values`` in one transaction (a ``None`` value is
        left out: that setting falls back to its default). Values of other concerns
        (``OWN_KEYS``) are kept."""
        with self.write() as conn:
            conn.execute(
                f"DELETE FROM library_settings WHERE key NOT IN ({', '.join('?' * len(OWN_KEYS))})",
                OWN_KEYS,
            )
            conn.executemany(
                "INSERT INTO library_settings (key, value, updated) VALUES (?, ?, ?)",
                [(k, json.dumps(v), now_iso()) for k, v in values.items() if v is not None],
            )

    def library_value(self, key: str) -> Any:
        """One library value of another concern than retrieval (``OWN_KEYS``); None unset."""
        row = self.conn.execute(
            "SELECT value FROM library_settings WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else json.loads(row["value"])

    def set_library_value(self, key: str, value: Any) -> None:
        """Set (None: remove) one library value of another concern (``OWN_KEYS``)."""
        if key not in OWN_KEYS:
            raise ValueError(f"not a library value: {key!r}")
        with self.write() as conn:
            conn.execute("DELETE FROM library_settings WHERE key = ?", (key,))
            if value is not None:
                conn.execute(
                    "INSERT INTO library_settings (key, value, updated) VALUES (?, ?, ?)",
                    (key, json.dumps(value), now_iso()),
                )
