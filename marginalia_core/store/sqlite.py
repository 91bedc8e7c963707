"""The one SQLite file: documents, chunks, conversations, messages.

A thin, explicit data layer over sqlite-utils. Every connection has foreign keys on, WAL and a busy
timeout; each thread gets its own connection, so several Streamlit sessions can read and write at
once. Writes take ``BEGIN IMMEDIATE`` (and a process lock) so a document and all its chunks land in
one transaction or not at all.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from marginalia_core.errors import NotFoundError
from marginalia_core.store.base import ChunkRecord
from marginalia_core.store.fingerprint import (
    NEAR_DUPLICATE_SHARE,
    Fingerprint,
    fingerprint,
    shared_share,
)
from marginalia_core.store.fts import SqliteLexical
from marginalia_core.store.job_table import JobTable
from marginalia_core.store.library_settings import LibrarySettingsTable
from marginalia_core.store.migrations import migrate
from marginalia_core.store.records import (
    Conversation,
    ConversationSummary,
    Document,
    Message,
    StoredChunk,
)
from marginalia_core.store.rows import (
    DOCUMENT_COLUMNS,
    KEEP,
    VECTOR_DTYPE,
    Keep,
    blob_to_vector,
    new_id,
    now_iso,
    scope_json,
    vector_to_blob,
)

BUSY_TIMEOUT_MS = 30_000
LOAD_PAGE_ROWS = 4096
CACHE_LOOKUP_ROWS = 500  # text hashes per embedding-cache query


class Store(JobTable, LibrarySettingsTable):
    """Data access for one database file. Cheap to share between threads."""

    backend = "sqlite"

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        migrate(self.conn)

    # -- connections -------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    @property
    def location(self) -> str:
        """Where the library lives, safe to show (a file path)."""
        return self.path

    @property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils view over this thread's connection, for browsing and simple reads."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite_utils.Database(self.conn)
            self._local.db = db
        return db

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                with suppress(sqlite3.Error):
                    conn.close()
            self._connections.clear()
        self._local = threading.local()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back whole on any exception (including KeyboardInterrupt)."""
        conn = self.conn
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def _bump_generation(self, conn: sqlite3.Connection, *, deleted: bool = False) -> None:
        keys = ("generation", "deletions") if deleted else ("generation",)
        conn.execute(
            f"UPDATE state SET value = value + 1 WHERE key IN ({','.join('?' * len(keys))})", keys
        )

    def generation(self) -> int:
        """Changes whenever the set of chunks changes, in this process or another."""
        row = self.conn.execute("SELECT value FROM state WHERE key = 'generation'").fetchone()
        return int(row[0])

    def counters(self, conn: sqlite3.Connection | None = None) -> tuple[int, int]:
        """(generation, deletions): the second moves only when chunks were removed."""
        rows = dict(
            (conn or self.conn).execute(
                "SELECT key, value FROM state WHERE key IN ('generation', 'deletions')"
            ).fetchall()
        )
        return int(rows["generation"]), int(rows.get("deletions", 0))

    # -- documents ---------------------------------------------------------------------------

    def find_by_hash(self, content_hash: str) -> Document | None:
        row = self.conn.execute(
            f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE content_hash = ?", (content_hash,)
        ).fetchone()
        return Document.from_row(row) if row else None

    def add_document(
        self,
        *,
        name: str,
        mime: str,
        size: int,
        content_hash: str,
        embed_model: str,
        embed_dim: int,
        chunks: Sequence[ChunkRecord],
        embeddings: np.ndarray,
        page_count: int = 1,
        chunk_target: int,
        chunk_overlap: int,
        text: str = "",
        page_starts: Sequence[int] = (0,),
        replace_id: str | None = None,
        document_id: str | None = None,
        original: bytes | None = None,
        ocr_pages: Sequence[int] = (),
        locations: str = "[]",
        source_url: str | None = None,
        fetched_at: str | None = None,
        parse_health: Mapping[str, Any] | None = None,
    ) -> Document:
        """Write a document and every chunk with its vector in one transaction.

        Its fingerprint (``store.fingerprint``) goes with it, for near-duplicate checks;
        ``parse_health`` is what extraction could not read well (``ingest.health``).

        ``original`` keeps the file's bytes (PDFs, for page views) in the same transaction.

        ``replace_id`` deletes that document in the same transaction (re-indexing), so readers see
        either the old version or the new one, never neither.
        """
        if len(chunks) != len(embeddings):
            raise ValueError("every chunk needs exactly one embedding")
        if len(chunks) and embeddings.shape[1] != embed_dim:
            raise ValueError("embedding dimension does not match the embedder")
        doc = Document(
            id=document_id or new_id(),
            name=name,
            mime=mime,
            size=int(size),
            chunk_count=len(chunks),
            page_count=int(page_count),
            content_hash=content_hash,
            embed_model=embed_model,
            embed_dim=int(embed_dim),
            chunk_target=int(chunk_target),
            chunk_overlap=int(chunk_overlap),
            created=now_iso(),
            ocr_pages=[int(p) for p in ocr_pages],
            locations=locations,
            source_url=source_url,
            fetched_at=fetched_at,
            parse_health=dict(parse_health or {}),
        )
        print_ = fingerprint(text)
        rows = [
            (
                doc.id, c.idx, c.text, c.start, c.end, c.page_start, c.page_end,
                getattr(c, "location", ""), vector_to_blob(embeddings[i]),
            )
            for i, c in enumerate(chunks)
        ]
        with self.write() as conn:
            replaced = bool(
                replace_id
                and conn.execute("DELETE FROM documents WHERE id = ?", (replace_id,)).rowcount
            )
            conn.execute(
                f"INSERT INTO documents ({DOCUMENT_COLUMNS}, text, page_starts, text_hash, "
                "fingerprint_units) VALUES "
                "(:id, :name, :mime, :size, :chunk_count, :page_count, :content_hash, "
                ":embed_model, :embed_dim, :chunk_target, :chunk_overlap, :created, "
                ":ocr_pages, :locations, :source_url, :fetched_at, :parse_health, :text, "
                ":page_starts, :text_hash, :units)",
                {**doc.to_dict(), "text": text, "page_starts": json.dumps(list(page_starts)),
                 "ocr_pages": json.dumps(doc.ocr_pages), "locations": doc.locations,
                 "parse_health": json.dumps(doc.parse_health),
                 "text_hash": print_.text_hash, "units": len(print_.units)},
            )
            conn.executemany(
                "INSERT INTO document_fingerprints (document_id, unit_hash) VALUES (?, ?)",
                [(doc.id, u) for u in print_.units],
            )
            conn.executemany(
                'INSERT INTO chunks (document_id, idx, content, start, "end", page_start, '
                "page_end, location, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            if original is not None:
                conn.execute(
                    "INSERT INTO document_files (document_id, data) VALUES (?, ?)",
                    (doc.id, bytes(original)),
                )
            self._bump_generation(conn, deleted=replaced)
        return doc

    def near_duplicates(
        self, print_: Fingerprint, *, exclude: str | None = None
    ) -> list[tuple[Document, float]]:
        """Documents whose text is the same as ``print_``'s after normalisation (share 1.0) or
        that share at least ``NEAR_DUPLICATE_SHARE`` of the passages, best first."""
        found: dict[str, float] = {
            r[0]: 1.0 for r in self.conn.execute(
                "SELECT id FROM documents WHERE text_hash = ?", (print_.text_hash,))
        }
        if print_.units:
            rows = self.conn.execute(
                "SELECT f.document_id, COUNT(*), d.fingerprint_units FROM document_fingerprints f "
                "JOIN documents d ON d.id = f.document_id WHERE f.unit_hash IN "
                "(SELECT value FROM json_each(?)) GROUP BY f.document_id",
                (json.dumps(sorted(print_.units)),),
            )
            for doc_id, shared, theirs in rows:
                share = shared_share(int(shared), len(print_.units), int(theirs))
                if share >= NEAR_DUPLICATE_SHARE:
                    found[doc_id] = max(found.get(doc_id, 0.0), share)
        found.pop(exclude or "", None)
        ranked = sorted(found.items(), key=lambda kv: -kv[1])
        return [(self.get_document(doc_id), share) for doc_id, share in ranked]

    def list_documents(self) -> list[Document]:
        rows = self.conn.execute(
            f"SELECT {DOCUMENT_COLUMNS} FROM documents ORDER BY created DESC"
        ).fetchall()
        return [Document.from_row(r) for r in rows]

    def get_document(self, document_id: str) -> Document:
        row = self.conn.execute(
            f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = ?", (document_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"No document with id {document_id!r}.")
        return Document.from_row(row)

    def delete_document(self, document_id: str) -> bool:
        """Delete a document; its chunks go with it (ON DELETE CASCADE)."""
        with self.write() as conn:
            cur = conn.execute("DELETE FROM documents WHERE id = ?", (document_id,))
            if cur.rowcount:
                self._bump_generation(conn, deleted=True)
        return bool(cur.rowcount)

    def document_source(self, document_id: str) -> tuple[str, list[int]]:
        """The document's extracted text and page start offsets, for re-chunking."""
        row = self.conn.execute(
            "SELECT text, page_starts FROM documents WHERE id = ?", (document_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"No document with id {document_id!r}.")
        return row["text"], json.loads(row["page_starts"])

    def document_file(self, document_id: str) -> bytes | None:
        """The original bytes kept for a document (PDFs), or None."""
        row = self.conn.execute(
            "SELECT data FROM document_files WHERE document_id = ?", (document_id,)
        ).fetchone()
        return bytes(row["data"]) if row else None

    # -- chunks ------------------------------------------------------------------------------

    def embedder_counts(self) -> dict[tuple[str, int], int]:
        """Documents per (model, dimension), to detect an index built by another embedder."""
        rows = self.conn.execute(
            "SELECT embed_model, embed_dim, COUNT(*) AS n FROM documents GROUP BY 1, 2"
        ).fetchall()
        return {(r["embed_model"], r["embed_dim"]): r["n"] for r in rows}

    def load_vectors(
        self, embed_model: str, embed_dim: int, *, after_id: int = 0
    ) -> tuple[tuple[int, int], np.ndarray, np.ndarray]:
        """((generation, deletions), chunk ids, float32 matrix) of this embedder's chunks with
        id > ``after_id``, ascending, read in one snapshot.

        Filled in place from a paged cursor: one matrix-sized allocation, no list of every
        row and no joined copy (at 1M chunks that is 3 GB instead of a 9 GB peak).
        """
        conn = self.conn
        where = (
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.embed_model = ? AND d.embed_dim = ? AND c.id > ?"
        )
        params = (embed_model, embed_dim, int(after_id))
        conn.execute("BEGIN")
        try:
            counters = self.counters(conn)
            n = conn.execute(f"SELECT COUNT(*) {where}", params).fetchone()[0]
            ids = np.empty(n, dtype=np.int64)
            matrix = np.empty((n, embed_dim), dtype=VECTOR_DTYPE)
            flat = matrix.reshape(-1).view(np.uint8)
            row_bytes = embed_dim * VECTOR_DTYPE.itemsize
            cur = conn.cursor()
            cur.row_factory = None
            cur.execute(f"SELECT c.id, c.embedding {where} ORDER BY c.id", params)
            i = 0
            while page := cur.fetchmany(LOAD_PAGE_ROWS):
                for cid, blob in page:
                    ids[i] = cid
                    flat[i * row_bytes : (i + 1) * row_bytes] = np.frombuffer(blob, np.uint8)
                    i += 1
        finally:
            conn.execute("COMMIT")
        return counters, ids[:i], matrix[:i].astype(np.float32, copy=False)

    def vector_pages(
        self, embed_model: str, embed_dim: int, *, after_id: int = 0, page_rows: int = LOAD_PAGE_ROWS
    ) -> Iterator[tuple[tuple[int, int], np.ndarray, np.ndarray]]:
        """This embedder's (counters, ids, float32 rows) with id > ``after_id``, ascending, a page
        at a time and all from one read snapshot: a quantised index is built from them without
        ever holding the whole float32 matrix."""
        conn = self.conn
        row_bytes = embed_dim * VECTOR_DTYPE.itemsize
        conn.execute("BEGIN")
        try:
            counters = self.counters(conn)
            cur = conn.cursor()
            cur.row_factory = None
            cur.execute(
                "SELECT c.id, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.embed_model = ? AND d.embed_dim = ? AND c.id > ? ORDER BY c.id",
                (embed_model, embed_dim, int(after_id)),
            )
            while page := cur.fetchmany(page_rows):
                ids = np.fromiter((r[0] for r in page), dtype=np.int64, count=len(page))
                flat = b"".join(r[1] for r in page)
                if len(flat) != len(page) * row_bytes:
                    raise ValueError("a stored vector does not match the embedder's dimension")
                yield counters, ids, np.frombuffer(flat, VECTOR_DTYPE).reshape(len(page), embed_dim)
        finally:
            conn.execute("COMMIT")

    def vector_ids(self, embed_model: str, embed_dim: int) -> tuple[tuple[int, int], np.ndarray]:
        """(counters, ascending ids) of this embedder's chunks: what a quantised index checks
        its rows against after a deletion, without reading a single vector."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            counters = self.counters(conn)
            cur = conn.cursor()
            cur.row_factory = None
            cur.execute(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.embed_model = ? AND d.embed_dim = ? ORDER BY c.id",
                (embed_model, embed_dim),
            )
            ids = np.fromiter((r[0] for r in cur), dtype=np.int64)
        finally:
            conn.execute("COMMIT")
        return counters, ids

    def vectors_by_ids(self, chunk_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(ids found, float32 rows) for these chunk ids, ascending; deleted ids are absent.
        The exact rescoring step of a quantised search reads its few candidates here."""
        wanted = sorted({int(i) for i in chunk_ids})
        got_ids: list[int] = []
        blobs: list[bytes] = []
        cur = self.conn.cursor()
        cur.row_factory = None
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            marks = ",".join("?" * len(part))
            for cid, blob in cur.execute(
                f"SELECT id, embedding FROM chunks WHERE id IN ({marks}) ORDER BY id", part
            ):
                got_ids.append(cid)
                blobs.append(blob)
        ids = np.asarray(got_ids, dtype=np.int64)
        if not blobs:
            return ids, np.zeros((0, 0), dtype=np.float32)
        rows = np.frombuffer(b"".join(blobs), VECTOR_DTYPE).reshape(len(blobs), -1)
        return ids, rows.astype(np.float32, copy=False)

    def chunk_count(self, embed_model: str, embed_dim: int) -> int:
        """Chunks of this embedder, from the documents' counts (no scan of the chunks): what a
        memory-mapped index checks its row count against at load."""
        row = self.conn.execute(
            "SELECT COALESCE(SUM(chunk_count), 0) FROM documents WHERE embed_model = ? AND embed_dim = ?",
            (embed_model, embed_dim),
        ).fetchone()
        return int(row[0])

    def library_token(self) -> int:
        """A random number fixed when the database was created (m012): a sidecar index file
        written for another database at the same path is never trusted."""
        row = self.conn.execute("SELECT value FROM state WHERE key = 'library_token'").fetchone()
        return int(row[0]) if row else 0

    def chunks_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Chunk rows (with document name) keyed by id; missing ids are simply absent. ``ocr``
        says whether the chunk's text came from OCR (any of its pages was read by OCR)."""
        out: dict[int, dict[str, Any]] = {}
        ids = [int(i) for i in chunk_ids]
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self.conn.execute(
                'SELECT c.id, c.document_id, c.idx, c.content, c.start, c."end", c.page_start, '
                "c.page_end, c.location, d.name AS document_name, d.mime, d.ocr_pages "
                "FROM chunks c "
                f"JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks})",
                part,
            ).fetchall()
            for r in rows:
                row = dict(r)
                ocr_pages = json.loads(row.pop("ocr_pages") or "[]")
                row["ocr"] = any(row["page_start"] <= p <= row["page_end"] for p in ocr_pages)
                out[row["id"]] = row
        return out

    def document_chunks(self, document_id: str) -> list[StoredChunk]:
        rows = self.conn.execute(
            'SELECT id, idx, content, start, "end", page_start, page_end, location FROM chunks '
            "WHERE document_id = ? ORDER BY idx",
            (document_id,),
        ).fetchall()
        return [StoredChunk.from_row(r) for r in rows]

    def integrity_report(self) -> dict[str, Any]:
        """What crash-safety checks look at: integrity, and documents whose chunks don't add up."""
        conn = self.conn
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        bad = conn.execute(
            "SELECT d.id, d.chunk_count, COUNT(c.id) AS stored FROM documents d "
            "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.id "
            "HAVING stored != d.chunk_count"
        ).fetchall()
        missing = conn.execute(
            "SELECT COUNT(*) FROM chunks WHERE embedding IS NULL OR length(embedding) = 0"
        ).fetchone()[0]
        orphans = conn.execute(
            "SELECT COUNT(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM documents)"
        ).fetchone()[0]
        return {
            "integrity": integrity,
            "mismatched_documents": [dict(r) for r in bad],
            "chunks_without_embedding": missing,
            "orphan_chunks": orphans,
        }

    # -- lexical (FTS5) ----------------------------------------------------------------------

    def bm25(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        chunk_ids: Sequence[int] | None = None,
        require_all: bool = False,
    ) -> list[tuple[int, float]]:
        return SqliteLexical(self.conn).bm25(
            terms, limit=limit, chunk_ids=chunk_ids, require_all=require_all
        )

    def term_chunk_counts(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        return SqliteLexical(self.conn).term_chunk_counts(terms)

    def chunks_containing(self, term: str, chunk_ids: Sequence[int]) -> list[int]:
        return SqliteLexical(self.conn).chunks_containing(term, chunk_ids)

    # -- embedding cache (ingestion, re-indexing, resumed jobs, the lab's sweeps) -------------

    def cached_embeddings(self, embedder: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached vectors of ``embedder`` by text hash (``base.text_hash``); misses are absent."""
        out: dict[str, np.ndarray] = {}
        wanted = list(dict.fromkeys(hashes))
        for start in range(0, len(wanted), CACHE_LOOKUP_ROWS):
            part = wanted[start : start + CACHE_LOOKUP_ROWS]
            rows = self.conn.execute(
                "SELECT text_hash, vector FROM embedding_cache WHERE embedder = ? "
                "AND text_hash IN (SELECT value FROM json_each(?))",
                (embedder, json.dumps(part)),
            )
            out.update((h, blob_to_vector(v)) for h, v in rows)
        return out

    def cache_embeddings(self, embedder: str, vectors: Mapping[str, np.ndarray]) -> None:
        """Add vectors by text hash in one transaction (a hash already cached is kept)."""
        if not vectors:
            return
        with self.write() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embedding_cache (embedder, text_hash, vector) "
                "VALUES (?, ?, ?)",
                [(embedder, h, vector_to_blob(v)) for h, v in vectors.items()],
            )

    def chunk_texts_and_vectors(
        self, embed_model: str, embed_dim: int
    ) -> Iterator[tuple[str, np.ndarray]]:
        """(chunk text, vector) of every chunk this embedder indexed."""
        for content, blob in self.conn.execute(
            "SELECT c.content, c.embedding FROM chunks c JOIN documents d "
            "ON d.id = c.document_id WHERE d.embed_model = ? AND d.embed_dim = ?",
            (embed_model, embed_dim),
        ):
            yield content, blob_to_vector(blob)

    # -- conversations -----------------------------------------------------------------------

    def create_conversation(self, title: str) -> Conversation:
        stamp = now_iso()
        conv = Conversation(id=new_id(), title=title, created=stamp, updated=stamp)
        with self.write() as conn:
            conn.execute(
                "INSERT INTO conversations (id, title, created, updated) "
                "VALUES (:id, :title, :created, :updated)",
                conv.to_dict(),
            )
        return conv

    def list_conversations(self) -> list[ConversationSummary]:
        rows = self.conn.execute(
            "SELECT c.id, c.title, c.created, c.updated, "
            "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count "
            "FROM conversations c ORDER BY c.updated DESC, c.created DESC"
        ).fetchall()
        return [ConversationSummary.from_row(dict(r)) for r in rows]

    def get_conversation(self, conversation_id: str) -> Conversation:
        """The conversation with ``documents``: the ids it is limited to, or None for all."""
        row = self.conn.execute(
            "SELECT id, title, created, updated, documents FROM conversations WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"No conversation with id {conversation_id!r}.")
        return Conversation.from_row(
            {**dict(row), "documents": self._existing_documents(row["documents"])})

    def _existing_documents(self, raw: str | None) -> list[str] | None:
        """A stored document scope without the documents deleted since; None (all documents)
        when nothing was chosen or every chosen document is gone."""
        if not raw:
            return None
        wanted = [str(i) for i in json.loads(raw)]
        if not wanted:
            return None
        marks = ",".join("?" * len(wanted))
        found = {
            r[0]
            for r in self.conn.execute(f"SELECT id FROM documents WHERE id IN ({marks})", wanted)
        }
        kept = [i for i in wanted if i in found]
        return kept or None

    def set_conversation_documents(
        self, conversation_id: str, document_ids: Sequence[str] | None
    ) -> None:
        """Limit a conversation to these documents (None or empty: all documents)."""
        with self.write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET documents = ? WHERE id = ?",
                (scope_json(document_ids), conversation_id),
            )
        if not cur.rowcount:
            raise NotFoundError(f"No conversation with id {conversation_id!r}.")

    def missing_documents(self, document_ids: Sequence[str]) -> list[str]:
        """The ids among ``document_ids`` that name no stored document."""
        ids = list(dict.fromkeys(str(i) for i in document_ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        found = {
            r[0] for r in self.conn.execute(f"SELECT id FROM documents WHERE id IN ({marks})", ids)
        }
        return [i for i in ids if i not in found]

    def chunk_ids_of_documents(self, document_ids: Sequence[str]) -> list[int]:
        """Every chunk id of these documents, ascending."""
        ids = list(dict.fromkeys(str(i) for i in document_ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.conn.execute(
            f"SELECT id FROM chunks WHERE document_id IN ({marks}) ORDER BY id", ids
        )
        return [int(r[0]) for r in rows]

    def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        """Give a conversation a new title (its order in the list does not change)."""
        with self.write() as conn:
            cur = conn.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
            )
        if not cur.rowcount:
            raise NotFoundError(f"No conversation with id {conversation_id!r}.")
        return self.get_conversation(conversation_id)

    def search_conversations(self, text: str, limit: int = 50) -> list[ConversationSummary]:
        """Conversations whose title or any message contains ``text`` (case-insensitive for
        ASCII), most recently updated first, each with ``matched``: the first matching message
        text, or "" when only the title matched."""
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self.conn.execute(
            "SELECT c.id, c.title, c.created, c.updated, "
            "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count, "
            "(SELECT m.content FROM messages m WHERE m.conversation_id = c.id "
            " AND m.content LIKE :p ESCAPE '\\' ORDER BY m.created LIMIT 1) AS matched "
            "FROM conversations c WHERE c.title LIKE :p ESCAPE '\\' OR EXISTS ("
            " SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
            " AND m.content LIKE :p ESCAPE '\\') "
            "ORDER BY c.updated DESC, c.created DESC LIMIT :limit",
            {"p": pattern, "limit": int(limit)},
        ).fetchall()
        return [ConversationSummary.from_row(dict(r)) for r in rows]

    def delete_conversation(self, conversation_id: str) -> bool:
        with self.write() as conn:
            cur = conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        return bool(cur.rowcount)

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        sources: Sequence[dict[str, Any]] = (),
    ) -> Message:
        with self.write():
            return self._insert_message(conversation_id, role, content, sources)

    def add_exchange(
        self,
        conversation_id: str,
        title: str,
        question: str,
        answer: str,
        sources: Sequence[dict[str, Any]],
        *,
        query: str | None = None,
        documents: Sequence[str] | None | Keep = KEEP,
        support: Sequence[dict[str, Any]] | None = None,
        status: str = "complete",
    ) -> tuple[Message, Message]:
        """Save a question with its complete (or stopped: ``status``) answer (creating the
        conversation if new) in one
        transaction, so a failed or interrupted answer leaves no trace. ``query`` is what was
        searched for it (kept on the answer); ``documents`` sets the conversation's document
        scope (None or empty: all), ``KEEP`` leaves it as it is."""
        with self.write() as conn:
            stamp = now_iso()
            conn.execute(
                "INSERT OR IGNORE INTO conversations (id, title, created, updated) "
                "VALUES (?, ?, ?, ?)",
                (conversation_id, title, stamp, stamp),
            )
            if not isinstance(documents, Keep):
                conn.execute(
                    "UPDATE conversations SET documents = ? WHERE id = ?",
                    (scope_json(documents), conversation_id),
                )
            user = self._insert_message(conversation_id, "user", question, ())
            assistant = self._insert_message(
                conversation_id, "assistant", answer, sources, query=query, support=support,
                status=status,
            )
        return user, assistant

    def _insert_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        sources: Sequence[dict[str, Any]],
        *,
        query: str | None = None,
        support: Sequence[dict[str, Any]] | None = None,
        status: str = "complete",
    ) -> Message:
        """Insert a message inside an open ``write()`` transaction and touch its conversation.
        ``support``: an answer's per-sentence citation check (chat.support), None when unchecked."""
        stamp = now_iso()
        msg = Message(
            id=new_id(), conversation_id=conversation_id, role=role, content=content,
            sources=list(sources), created=stamp, query=query,
            support=None if support is None else list(support), status=status,
        )
        row = {**msg.to_dict(), "sources": json.dumps(msg.sources, ensure_ascii=False),
               "support": None if msg.support is None
               else json.dumps(msg.support, ensure_ascii=False)}
        conn = self.conn
        conn.execute(
            "INSERT INTO messages (id, conversation_id, role, content, sources, created, query, "
            "support, status) VALUES (:id, :conversation_id, :role, :content, :sources, "
            ":created, :query, :support, :status)",
            row,
        )
        conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (stamp, conversation_id))
        return msg

    def messages(self, conversation_id: str, limit: int | None = None) -> list[Message]:
        """Messages oldest first, sources parsed; ``limit`` keeps the most recent ones. An
        answer's ``query`` is what was searched for it (None on questions and older answers)."""
        sql = (
            "SELECT id, conversation_id, role, content, sources, created, query, support, status "
            "FROM messages "
            "WHERE conversation_id = ? ORDER BY created DESC, rowid DESC"
        )
        params: list[Any] = [conversation_id]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        rows = self.conn.execute(sql, params).fetchall()
        return [Message.from_row(r) for r in reversed(rows)]
