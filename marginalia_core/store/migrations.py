"""Versioned schema migrations on sqlite-utils' own ``Migrations`` (as llm's
``embeddings_migrations.py`` does): each step is a function applied once, in order, and recorded in
``_sqlite_migrations``. Every statement is its own ``execute`` call, so nothing has to split SQL
scripts, and the whole upgrade runs under one ``BEGIN IMMEDIATE`` so that several processes opening
the same file apply each step exactly once."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

import sqlite_utils
from sqlite_utils.migrations import Migrations

from marginalia_core.citations import renumber_sources
from marginalia_core.store.base import text_hash
from marginalia_core.store.fingerprint import fingerprint

MIGRATION_SET = "marginalia"
# Releases up to 0.1 recorded applied steps here; their names are adopted on first open.
LEGACY_TABLE = "_migrations"

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS = Migrations(MIGRATION_SET)


def migration(fn: Migration) -> Migration:
    """Register ``fn`` under its own name; it gets the raw connection, inside the upgrade's
    transaction."""

    def step(db: sqlite_utils.Database) -> None:
        fn(db.conn)

    step.__name__ = fn.__name__
    MIGRATIONS(name=fn.__name__)(step)
    return fn


def run_statements(conn: Any, *statements: str) -> None:
    """One ``execute`` per statement, inside the caller's transaction (SQLite or PostgreSQL):
    no script splitting, and a failure leaves the transaction to roll back whole."""
    for statement in statements:
        conn.execute(statement)


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    run_statements(
        conn,
        # documents keep the extracted text and its page offsets (text, page_starts), so
        # re-chunking needs no original file
        """CREATE TABLE documents (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            mime TEXT NOT NULL,
            size INTEGER NOT NULL,
            chunk_count INTEGER NOT NULL,
            page_count INTEGER NOT NULL DEFAULT 1,
            content_hash TEXT NOT NULL UNIQUE,
            embed_model TEXT NOT NULL,
            embed_dim INTEGER NOT NULL,
            chunk_target INTEGER NOT NULL,
            chunk_overlap INTEGER NOT NULL,
            created TEXT NOT NULL,
            text TEXT NOT NULL DEFAULT '',
            page_starts TEXT NOT NULL DEFAULT '[0]'
        )""",
        # AUTOINCREMENT: a chunk id is never reused after a delete, so an in-memory matrix
        # loaded before the delete can never attribute its score to a newer chunk
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            content TEXT NOT NULL,
            start INTEGER NOT NULL,
            "end" INTEGER NOT NULL,
            page_start INTEGER NOT NULL,
            page_end INTEGER NOT NULL,
            embedding BLOB NOT NULL,
            UNIQUE (document_id, idx)
        )""",
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            created TEXT NOT NULL,
            updated TEXT NOT NULL
        )""",
        "CREATE INDEX conversations_updated ON conversations(updated)",
        """CREATE TABLE messages (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL,
            sources TEXT NOT NULL DEFAULT '[]',
            created TEXT NOT NULL
        )""",
        "CREATE INDEX messages_conversation ON messages(conversation_id, created)",
        # bumped by every write that changes the set of chunks, so in-memory indexes
        # (this process or another) know to reload
        "CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT INTO state (key, value) VALUES ('generation', 0)",
    )


@migration
def m002_chunks_fts(conn: sqlite3.Connection) -> None:
    """BM25 over chunk text, kept in step with ``chunks`` by triggers (external content)."""
    run_statements(
        conn,
        """CREATE VIRTUAL TABLE chunks_fts USING fts5(
            content, content='chunks', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, content) VALUES (new.id, new.content);
        END""",
        """CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END""",
        """CREATE TRIGGER chunks_au AFTER UPDATE OF content ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO chunks_fts(rowid, content) VALUES (new.id, new.content);
        END""",
        "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')",
    )


@migration
def m003_deletion_counter(conn: sqlite3.Connection) -> None:
    """Bumped by every write that removes chunks: while it stands still, an in-memory index can
    load just the chunks added since (ids only grow) instead of every vector again."""
    conn.execute("INSERT OR IGNORE INTO state (key, value) VALUES ('deletions', 0)")


@migration
def m004_sources_snake_case(conn: sqlite3.Connection) -> None:
    """Saved sources use the Python naming (``document_name``, ``chunk_id``); releases up to 0.1
    stored the wire's camelCase. The wire form is made only when events are serialised."""
    rows = conn.execute("SELECT id, sources FROM messages WHERE sources != '[]'").fetchall()
    for message_id, raw in rows:
        sources = json.loads(raw or "[]")
        fixed = [{_snake(k): v for k, v in s.items()} for s in sources if isinstance(s, dict)]
        conn.execute("UPDATE messages SET sources = ? WHERE id = ?",
                     (json.dumps(fixed, ensure_ascii=False), message_id))


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


@migration
def m005_retrieval_lab(conn: sqlite3.Connection) -> None:
    """Question sets with judgments, saved retrieval configurations, and an embedding cache
    keyed by text hash. Judgments name a document and a page range or text span, never a
    chunk id, so they survive re-indexing with another chunking."""
    run_statements(
        conn,
        """CREATE TABLE question_sets (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            description TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL
        )""",
        """CREATE TABLE questions (
            id TEXT PRIMARY KEY,
            set_id TEXT NOT NULL REFERENCES question_sets(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            external_id TEXT NOT NULL,
            text TEXT NOT NULL,
            UNIQUE (set_id, external_id)
        )""",
        "CREATE INDEX questions_set ON questions(set_id, position)",
        """CREATE TABLE judgments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            question_id TEXT NOT NULL REFERENCES questions(id) ON DELETE CASCADE,
            document TEXT NOT NULL,
            page_start INTEGER,
            page_end INTEGER,
            span_start INTEGER,
            span_end INTEGER,
            grade INTEGER NOT NULL DEFAULT 1,
            excerpt TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX judgments_question ON judgments(question_id)",
        """CREATE TABLE retrieval_configs (
            name TEXT PRIMARY KEY,
            config TEXT NOT NULL,
            created TEXT NOT NULL
        )""",
        """CREATE TABLE embedding_cache (
            key TEXT PRIMARY KEY,
            vector BLOB NOT NULL
        )""",
    )


@migration
def m006_conversation_scope(conn: sqlite3.Connection) -> None:
    """A conversation can be limited to some documents (``documents``: a JSON list of ids, NULL =
    all), and each answer keeps the query actually searched (a follow-up is rewritten), so a
    reopened conversation shows both; answers saved earlier are renumbered from [1] in the order
    they first cite their sources, as new ones are. A JSON list rather than a join table with
    foreign keys: re-indexing replaces a document's row under the same id, which would cascade
    it away."""
    conn.execute("ALTER TABLE conversations ADD COLUMN documents TEXT")
    conn.execute("ALTER TABLE messages ADD COLUMN query TEXT")
    # answers saved before are renumbered like new ones: from [1], in the order first cited
    rows = conn.execute(
        "SELECT id, content, sources FROM messages WHERE role = 'assistant' AND sources != '[]'"
    ).fetchall()
    for message_id, content, raw in rows:
        sources = [s for s in json.loads(raw or "[]") if isinstance(s, dict) and "n" in s]
        text, kept, _, _ = renumber_sources(content, sources)
        if text != content or kept != sources:
            conn.execute("UPDATE messages SET content = ?, sources = ? WHERE id = ?",
                         (text, json.dumps(kept, ensure_ascii=False), message_id))


@migration
def m007_document_files(conn: sqlite3.Connection) -> None:
    """The original bytes of a document whose pages can be shown (PDFs): the margin renders
    the cited page from them. Written with the document, deleted with it (cascade)."""
    conn.execute(
        "CREATE TABLE document_files ("
        "document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE, "
        "data BLOB NOT NULL)"
    )


@migration
def m008_document_ocr_pages(conn: sqlite3.Connection) -> None:
    """Which pages of a document were read by OCR (a JSON list of 1-based page numbers; empty
    for text-layer documents), so the library and the margin can say the text is recognised,
    not typed."""
    conn.execute("ALTER TABLE documents ADD COLUMN ocr_pages TEXT NOT NULL DEFAULT '[]'")


@migration
def m009_ingest_jobs(conn: sqlite3.Connection) -> None:
    """Ingestion jobs: an upload waits here (with its bytes, so a restart can resume it) until a
    worker claims it, and keeps its progress and outcome after. The bytes are dropped when the
    job ends; passwords are never stored. ``document_id`` is not a foreign key: the job's record
    outlives a later delete of its document."""
    run_statements(
        conn,
        """CREATE TABLE ingest_jobs (
            id TEXT PRIMARY KEY,
            batch_id TEXT NOT NULL,
            position INTEGER NOT NULL DEFAULT 1,
            batch_size INTEGER NOT NULL DEFAULT 1,
            name TEXT NOT NULL,
            mime TEXT,
            size INTEGER NOT NULL,
            data BLOB,
            status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'refused',
                'cancelled', 'failed', 'interrupted')),
            stage TEXT NOT NULL DEFAULT '',
            pages_done INTEGER NOT NULL DEFAULT 0,
            pages_total INTEGER NOT NULL DEFAULT 0,
            chunks_done INTEGER NOT NULL DEFAULT 0,
            chunks_total INTEGER NOT NULL DEFAULT 0,
            reason TEXT,
            message TEXT NOT NULL DEFAULT '',
            document_id TEXT,
            duplicate INTEGER NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            owner TEXT,
            heartbeat TEXT,
            created TEXT NOT NULL,
            started TEXT,
            finished TEXT
        )""",
        "CREATE INDEX ingest_jobs_status ON ingest_jobs(status, created, position)",
        "CREATE INDEX ingest_jobs_created ON ingest_jobs(created)",
    )


@migration
def m010_library_settings(conn: sqlite3.Connection) -> None:
    """Retrieval settings applied to the library from the Inspector's lab (mode, threshold,
    passages returned, keyword weight, passage size): one JSON value per key. Chat reads them
    over the environment's defaults, so what was tuned is what answers use."""
    run_statements(
        conn,
        """CREATE TABLE library_settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            updated TEXT NOT NULL
        )""",
    )


@migration
def m012_library_token(conn: sqlite3.Connection) -> None:
    """A random token fixed for the life of the database: the quantised vector sidecar
    (``<db>.vectors/``) records it, so codes written for another database that later sat at
    the same path are rebuilt, never served."""
    conn.execute(
        "INSERT OR IGNORE INTO state (key, value) VALUES ('library_token', (random() & 4611686018427387903) + 1)"
    )


@migration
def m013_message_support(conn: sqlite3.Connection) -> None:
    """An answer's per-sentence citation check (``chat.support``), saved with it as a JSON list
    of {sentence, marks, score, supported}; NULL for answers saved before the check existed."""
    conn.execute("ALTER TABLE messages ADD COLUMN support TEXT")


@migration
def m015_embedding_cache(conn: sqlite3.Connection) -> None:
    """Embed once: the cache is keyed by (embedder key, text hash) and used by ingestion,
    re-indexing, resumed jobs and the lab's sweeps, so a text already embedded by an embedder is
    never embedded by it again. The lab-only cache it replaces (one opaque key) is dropped; the
    library's own chunks seed the new one, so re-indexing what was indexed before costs nothing.
    ``WITHOUT ROWID``: the key is the table."""
    run_statements(
        conn,
        "DROP TABLE IF EXISTS embedding_cache",
        """CREATE TABLE embedding_cache (
            embedder TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (embedder, text_hash)
        ) WITHOUT ROWID""",
    )
    conn.create_function("marginalia_text_hash", 1, text_hash, deterministic=True)
    conn.execute(
        "INSERT OR IGNORE INTO embedding_cache (embedder, text_hash, vector) "
        "SELECT d.embed_model || '@' || d.embed_dim, marginalia_text_hash(c.content), c.embedding "
        "FROM chunks c JOIN documents d ON d.id = c.document_id"
    )


@migration
def m017_document_fingerprint(conn: sqlite3.Connection) -> None:
    """What a document is and how well it was read: its text hash after normalisation and its
    passage hashes (``store.fingerprint``: a re-saved or one-byte-different copy is caught as a
    near-duplicate, naming the one indexed), and its parse health (pages without text, OCR'd
    or garbled pages, tables found: ``ingest.health``; ``{}`` for documents indexed before,
    shown as "not checked"). Existing documents get their fingerprint from their stored text."""
    run_statements(
        conn,
        "ALTER TABLE documents ADD COLUMN text_hash TEXT",
        "ALTER TABLE documents ADD COLUMN fingerprint_units INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE documents ADD COLUMN parse_health TEXT NOT NULL DEFAULT '{}'",
        "CREATE INDEX documents_text_hash ON documents(text_hash)",
        """CREATE TABLE document_fingerprints (
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            unit_hash TEXT NOT NULL,
            PRIMARY KEY (document_id, unit_hash)
        ) WITHOUT ROWID""",
        "CREATE INDEX document_fingerprints_unit ON document_fingerprints(unit_hash)",
    )
    for doc_id, text in conn.execute("SELECT id, text FROM documents").fetchall():
        print_ = fingerprint(text or "")
        conn.execute("UPDATE documents SET text_hash = ?, fingerprint_units = ? WHERE id = ?",
                     (print_.text_hash, len(print_.units), doc_id))
        conn.executemany(
            "INSERT INTO document_fingerprints (document_id, unit_hash) VALUES (?, ?)",
            [(doc_id, u) for u in print_.units],
        )


# A PDF passage's label, as ``ingest.formats.location_label`` writes it for new documents.
PDF_LOCATION_SQL = (
    "CASE WHEN page_start = page_end THEN 'p. ' || page_start "
    "ELSE 'pp. ' || page_start || '–' || page_end END"
)
DOCUMENT_SOURCE_STATEMENTS = (
    "ALTER TABLE documents ADD COLUMN locations TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE documents ADD COLUMN source_url TEXT",
    "ALTER TABLE documents ADD COLUMN fetched_at TEXT",
    "ALTER TABLE chunks ADD COLUMN location TEXT NOT NULL DEFAULT ''",
    f"UPDATE chunks SET location = {PDF_LOCATION_SQL} WHERE document_id IN "
    "(SELECT id FROM documents WHERE mime = 'application/pdf')",
)


@migration
def m018_document_source(conn: sqlite3.Connection) -> None:
    """Where a document's passages are and where it came from: the page map generalised to
    slides, sheet rows, chapters and sections (``documents.locations``: the names of its
    locations, ``chunks.location``: the label a citation shows, "slide 3", "sheet Budget, rows
    12–40"), and a web page's final URL and fetch time. PDF passages get their page label."""
    run_statements(conn, *DOCUMENT_SOURCE_STATEMENTS)


@migration
def m016_question_answers(conn: sqlite3.Connection) -> None:
    """A question's expected answer (empty: none given), for the lab's answer metrics."""
    conn.execute("ALTER TABLE questions ADD COLUMN answer TEXT NOT NULL DEFAULT ''")


@migration
def m014_message_status(conn: sqlite3.Connection) -> None:
    """An answer's status: ``complete``, or ``stopped`` when the reader pressed Stop (what was
    said so far is kept with its question, marked as such)."""
    conn.execute("ALTER TABLE messages ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'")


@migration
def m019_judgment_location(conn: sqlite3.Connection) -> None:
    """A judgment's location as its passage named it ("slide 2", "sheet Budget, rows 12–40";
    empty for PDF pages and text files), so a question set names a slide a slide, not "p. 2"."""
    conn.execute("ALTER TABLE judgments ADD COLUMN location TEXT NOT NULL DEFAULT ''")


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; returns the names applied. Safe to call from several processes:
    the upgrade holds the write lock from reading what is pending to recording what it applied."""
    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        _adopt_legacy_record(db)
        pending = [m.name for m in MIGRATIONS.pending(db)]
        MIGRATIONS.apply(db)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return pending


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the applied migrations, in the order they were applied."""
    return [m.name for m in MIGRATIONS.applied(sqlite_utils.Database(conn))]


def registered() -> list[str]:
    """Every migration's name, in the order they apply (what a new database gets)."""
    return [m.name for m in MIGRATIONS.pending(sqlite_utils.Database(memory=True))]


def _adopt_legacy_record(db: sqlite_utils.Database) -> None:
    """Carry the names a release-0.1 database recorded in ``_migrations`` over to sqlite-utils'
    table, so its applied steps are not run again."""
    if not db[LEGACY_TABLE].exists():
        return
    MIGRATIONS.ensure_migrations_table(db)
    known = {m.name for m in MIGRATIONS.applied(db)}
    rows = db.execute(f"SELECT name, applied FROM {LEGACY_TABLE} ORDER BY rowid").fetchall()
    db.table(Migrations.migrations_table).insert_all(
        {"migration_set": MIGRATION_SET, "name": name, "applied_at": when or ""}
        for name, when in rows if name not in known
    )
    db.execute(f"DROP TABLE {LEGACY_TABLE}")
