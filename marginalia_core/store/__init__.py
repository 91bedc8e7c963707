"""Storage: the library's documents, chunks with their vectors, full text, conversations,
messages, question sets, ingestion jobs and applied settings, in SQLite or PostgreSQL. Only this
package speaks SQL or names a backend; the layers above open a store here and use the
``LibraryStore`` interface (``store.base``) and the shared values of ``store.rows``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marginalia_core.config import Settings
from marginalia_core.store.base import LexicalSource, LibraryStore


def open_store(settings: Settings) -> LibraryStore:
    """PostgreSQL when ``MARGINALIA_DATABASE_URL`` is set, else the SQLite file."""
    if settings.database_url:
        return open_postgres(settings.database_url)
    return open_sqlite(settings.ensure_db_dir())


def open_sqlite(path: str | Path) -> LibraryStore:
    """A SQLite library at ``path`` (created and migrated as needed): the default store, and
    the lab's scratch indexes."""
    from marginalia_core.store.sqlite import Store

    return Store(path)


def open_postgres(url: str) -> LibraryStore:
    from marginalia_core.store.postgres import PostgresStore

    return PostgresStore(url)


def sqlite_lexical(conn: Any) -> LexicalSource:
    """The FTS5 lexical side over a bare SQLite connection (benchmarks, scratch files)."""
    from marginalia_core.store.fts import SqliteLexical

    return SqliteLexical(conn)


def copy_to_postgres(source: LibraryStore, url: str) -> dict[str, Any]:
    """Copy a SQLite library into the empty PostgreSQL database at ``url`` in one transaction
    and compare what landed (row counts, sampled vectors): ``postgres.import_sqlite``'s report."""
    from marginalia_core.store.postgres import PostgresStore, import_sqlite

    target = PostgresStore(url)
    try:
        return import_sqlite(source, target)
    finally:
        target.close()
