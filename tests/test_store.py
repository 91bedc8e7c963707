"""The store on both backends (SQLite and PostgreSQL, see conftest's ``store_backend``): schema,
transactions, cascades, thread safety; the SQLite file's own migrations and pragmas."""

from __future__ import annotations

import multiprocessing
import re
import shutil
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from marginalia_core.errors import NotFoundError
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.store.migrations import applied, migrate, registered
from marginalia_core.store.sqlite import Store

pytestmark = pytest.mark.both_backends

try:
    import psycopg

    INTEGRITY_ERRORS: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,
                                                         psycopg.IntegrityError)
except ImportError:  # PostgreSQL runs are skipped then
    INTEGRITY_ERRORS = (sqlite3.IntegrityError,)


def _add(store: Store, name: str = "a.txt", text: str = "Alpha beta. " * 300, dim: int = 8, **kw):
    chunks = chunk_text(text, page_starts=list(kw.get("page_starts", [0])))
    vectors = np.random.default_rng(len(name)).normal(size=(len(chunks), dim)).astype(np.float32)
    return store.add_document(
        name=name, mime="text/plain", size=len(text), content_hash=kw.pop("content_hash", name),
        embed_model=kw.pop("embed_model", "m"), embed_dim=dim, chunks=chunks, embeddings=vectors,
        chunk_target=1400, chunk_overlap=200, text=text, **kw,
    ), chunks, vectors


def test_migrations_recorded_once(db_path):
    s1 = Store(db_path)
    s1.close()
    s2 = Store(db_path)
    names = applied(s2.conn)
    assert names == registered()
    assert names[0] == "m001_initial" and len(names) == len(set(names))
    assert migrate(s2.conn) == []
    s2.close()


@pytest.mark.sqlite_only
def test_pragmas(store):
    conn = store.conn
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_add_document_writes_chunks_and_vectors(store):
    doc, chunks, vectors = _add(store)
    assert doc.chunk_count == len(chunks) > 1
    rows = store.document_chunks(doc.id)
    assert [r.idx for r in rows] == list(range(len(chunks)))
    _, ids, matrix = store.load_vectors("m", 8)
    assert ids.tolist() == [r.id for r in rows]
    assert np.array_equal(matrix, vectors)  # float32 round trip, bit for bit
    text, pages = store.document_source(doc.id)
    assert text.startswith("Alpha beta.") and pages == [0]


def test_failed_write_leaves_nothing(store):
    _add(store, "first.txt")
    before = store.generation()
    chunks = chunk_text("Some text here. " * 200)
    bad = np.zeros((len(chunks) - 1, 8), dtype=np.float32)  # one vector short
    with pytest.raises(ValueError):
        store.add_document(
            name="b", mime="text/plain", size=1, content_hash="b", embed_model="m", embed_dim=8,
            chunks=chunks, embeddings=bad, chunk_target=1400, chunk_overlap=200,
        )
    # a constraint failure inside the transaction rolls back the document row too
    with pytest.raises(INTEGRITY_ERRORS):
        _add(store, "first.txt")  # same content hash
    assert [d.name for d in store.list_documents()] == ["first.txt"]
    assert store.generation() == before
    report = store.integrity_report()
    assert report["integrity"] == "ok" and not report["mismatched_documents"]


def test_delete_cascades_and_bumps_generation(store):
    doc, _, _ = _add(store)
    gen = store.generation()
    assert store.delete_document(doc.id)
    assert store.generation() == gen + 1
    assert store.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    assert store.bm25(["alpha"], limit=10) == []  # gone from the full-text index too
    assert not store.delete_document(doc.id)
    with pytest.raises(NotFoundError):
        store.get_document(doc.id)


def test_replace_is_atomic(store):
    doc, _, _ = _add(store, content_hash="h")
    new, chunks, _ = _add(store, "a.txt", text="Gamma delta. " * 50, content_hash="h",
                          replace_id=doc.id, document_id=doc.id)
    assert new.id == doc.id
    assert store.get_document(doc.id).chunk_count == len(chunks)
    assert len(store.document_chunks(doc.id)) == len(chunks)


def test_load_vectors_filters_by_embedder(store):
    _add(store, "a.txt", embed_model="m1")
    _add(store, "b.txt", embed_model="m2")
    (gen, _), ids, matrix = store.load_vectors("m1", 8)
    assert gen == store.generation()
    assert matrix.shape == (len(ids), 8) and matrix.dtype == np.float32
    owners = {r["document_name"] for r in store.chunks_by_ids(ids.tolist()).values()}
    assert owners == {"a.txt"}
    assert store.embedder_counts() == {("m1", 8): 1, ("m2", 8): 1}


def test_conversations_order_and_cascade(store):
    a = store.create_conversation("first")
    b = store.create_conversation("second")
    store.add_message(a.id, "user", "hello")
    assert [c.id for c in store.list_conversations()] == [a.id, b.id]
    store.add_exchange(b.id, "second", "q", "answer [1]", [{"n": 1, "content": "x"}])
    convs = store.list_conversations()
    assert convs[0].id == b.id and convs[0].message_count == 2
    msgs = store.messages(b.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].sources == [{"n": 1, "content": "x"}]
    assert store.delete_conversation(b.id)
    assert store.conn.execute(
        "SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (b.id,)
    ).fetchone()[0] == 0


def test_an_answer_keeps_its_status_stopped_or_complete(store):
    store.add_exchange("c1", "title", "q1", "a1", [])
    store.add_exchange("c1", "title", "q2", "the start of", [], status="stopped")
    assert [m.status for m in store.messages("c1")] == ["complete"] * 3 + ["stopped"]


def test_add_exchange_creates_conversation_atomically(store):
    store.add_exchange("c1", "title", "q", "a", [])
    assert store.get_conversation("c1").title == "title"
    # the role check fails on the second insert -> the first is rolled back with it
    with pytest.raises(INTEGRITY_ERRORS), store.write():
        store._insert_message("c1", "user", "q2", ())
        store._insert_message("c1", "robot", "a2", ())
    assert len(store.messages("c1")) == 2


def test_messages_limit_keeps_latest_in_order(store):
    conv = store.create_conversation("t")
    for i in range(14):
        store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"m{i}")
    last = store.messages(conv.id, limit=10)
    assert [m.content for m in last] == [f"m{i}" for i in range(4, 14)]


def test_threads_write_and_read_concurrently(store):
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(5):
                _add(store, f"t{i}-{j}.txt", text=f"Thread {i} doc {j}. " * 100)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(50):
                _, ids, matrix = store.load_vectors("m", 8)
                assert len(ids) == len(matrix)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store.list_documents()) == 20
    assert not store.integrity_report()["mismatched_documents"]


@pytest.mark.sqlite_only
def test_database_is_browsable_with_sqlite_utils(store):
    """The README points people at sqlite-utils/Datasette: the tables they'd look at are there."""
    _add(store)
    tables = set(store.db.table_names())
    assert {"documents", "chunks", "chunks_fts", "conversations", "messages", "_sqlite_migrations"} <= tables
    assert store.db["documents"].count == 1
    assert store.db["chunks"].count == store.list_documents()[0].chunk_count
    fks = {(fk.column, fk.other_table) for fk in store.db["chunks"].foreign_keys}
    assert ("document_id", "documents") in fks


RELEASE_0_1_DB = Path(__file__).parent / "data" / "release-0.1.db"


def test_a_database_made_by_release_0_1_upgrades_in_place(tmp_path):
    """tests/data/release-0.1.db was written by release 0.1 (commit 6d2d64b: the CLI ingested two
    samples and answered one question). Opening it upgrades it in place and loses nothing."""
    path = tmp_path / "library.db"
    shutil.copy(RELEASE_0_1_DB, path)
    old = sqlite3.connect(path)
    old_applied = [r[0] for r in old.execute("SELECT name FROM _migrations ORDER BY rowid")]
    old_chunks = old.execute("SELECT id, content, embedding FROM chunks ORDER BY id").fetchall()
    old.close()
    assert old_applied == ["m001_initial", "m002_chunks_fts", "m003_deletion_counter"]

    store = Store(path)
    assert applied(store.conn)[:3] == old_applied
    assert "m004_sources_snake_case" in applied(store.conn)
    assert "_migrations" not in store.db.table_names()  # one record of what ran, sqlite-utils'
    now = [tuple(r) for r in store.conn.execute("SELECT id, content, embedding FROM chunks ORDER BY id")]
    assert now == [tuple(r) for r in old_chunks]
    assert sorted(d.name for d in store.list_documents()) == [
        "a-short-history-of-marginalia.md", "caring-for-old-books.pdf"]
    (conversation,) = store.list_conversations()
    answer = store.messages(conversation.id)[-1]
    assert answer.sources and "document_name" in answer.sources[0]
    assert "documentName" not in answer.sources[0]
    # the FTS index made by 0.1 still answers after the upgrade
    hits = store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'Fermat'").fetchall()
    assert hits
    # m018: the PDF's passages are labelled with their pages, the Markdown file's with nothing
    labels = dict(store.conn.execute(
        "SELECT d.name, group_concat(c.location, '|') FROM chunks c JOIN documents d "
        "ON d.id = c.document_id GROUP BY d.name").fetchall())
    assert re.fullmatch(r"(pp?\. \d(\u2013\d)?\|?)+", labels["caring-for-old-books.pdf"])
    assert set(labels["a-short-history-of-marginalia.md"].split("|")) == {""}
    store.close()
    assert migrate(sqlite3.connect(path, isolation_level=None)) == []


def _open_store(path: str) -> None:
    Store(path).close()


def test_processes_opening_a_new_file_at_once_apply_each_migration_once(tmp_path):
    path = str(tmp_path / "race.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_store, args=(path,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    conn = sqlite3.connect(path)
    names = [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")]
    assert len(names) == len(set(names)) == len(registered())


def test_sources_saved_by_release_0_1_in_camelcase_upgrade_to_snake_case(db_path):
    """Release 0.1 saved message sources in the wire's camelCase; m004 renames their keys."""
    store = Store(db_path)
    _, message = store.add_exchange(store.create_conversation("t").id, "t", "q", "a [1]", [])
    old = '[{"n": 1, "documentName": "a.md", "chunkId": 3, "pageEnd": 2, "page": 1}]'
    with store.write() as conn:
        conn.execute("UPDATE messages SET sources = ? WHERE id = ?", (old, message.id))
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm004_sources_snake_case'")
    store.close()
    conn = sqlite3.connect(db_path, isolation_level=None)
    assert migrate(conn) == ["m004_sources_snake_case"]
    conn.close()
    store = Store(db_path)
    saved = store.messages(message.conversation_id)[-1].sources
    assert saved == [{"n": 1, "document_name": "a.md", "chunk_id": 3, "page_end": 2, "page": 1}]
    store.close()


def test_a_release_0_1_library_is_searchable_and_answerable_after_the_upgrade(tmp_path, local_embedder):
    from marginalia_core.config import Settings
    from marginalia_core.workspace import Workspace

    path = tmp_path / "library.db"
    shutil.copy(RELEASE_0_1_DB, path)
    ws = Workspace(Settings(db_path=str(path), embedder="local", answerer="extractive"))
    ws.__dict__["embedder"] = local_embedder  # the loaded model, shared across tests
    try:
        assert ws.stale_documents() == []  # same embedder and chunking: nothing to re-index
        hits = ws.search("What did Fermat write in the margin?")
        assert hits and hits[0].document_name == "a-short-history-of-marginalia.md"
        (conversation,) = ws.conversations()
        events = list(ws.ask("and who proved it?", conversation_id=conversation.id))
        assert events[-1]["type"] == "done"
        assert len(ws.messages(conversation.id)) == 4
    finally:
        ws.close()


def test_embedding_cache_by_embedder_and_text_hash(store):
    """Vectors are cached per (embedder key, text hash): another embedder never sees them, a
    hash already cached keeps its first vector."""
    v = np.arange(8, dtype=np.float32)
    store.cache_embeddings("m@8", {"h1": v, "h2": v + 1})
    store.cache_embeddings("m@8", {"h1": v * 0})  # an existing key is kept
    got = store.cached_embeddings("m@8", ["h1", "h2", "missing"])
    assert set(got) == {"h1", "h2"} and np.array_equal(got["h1"], v)
    assert store.cached_embeddings("other@8", ["h1"]) == {}
    assert store.cached_embeddings("m@8", []) == {}


def test_embedding_cache_migration_seeds_from_the_librarys_chunks(store, db_path, database_url):
    """A library indexed before the cache existed: m015 / p008 fill it from the stored chunks,
    so re-indexing with the same passages embeds nothing."""
    from marginalia_core.config import Settings
    from marginalia_core.store import open_store
    from marginalia_core.store.base import text_hash

    doc, chunks, vectors = _add(store)
    with store.write() as conn:  # as if the cache step had never run
        if store.backend == "sqlite":
            conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm015_embedding_cache'")
        else:
            conn.execute("DELETE FROM marginalia_migrations WHERE name = 'p008_embedding_cache'")
        conn.execute("DELETE FROM embedding_cache")
    store.close()
    again = open_store(Settings(db_path=str(db_path), database_url=database_url))
    try:
        got = again.cached_embeddings("m@8", [text_hash(c.text) for c in chunks])
        assert len(got) == len({c.text for c in chunks})
        assert np.allclose(got[text_hash(chunks[0].text)], vectors[0])
    finally:
        again.close()


def test_rename_search_and_original_file(store):
    """The conversation list's rename and search, and the PDF bytes kept for page views."""
    conv = store.create_conversation("Sourdough")
    store.add_exchange(conv.id, "Sourdough", "How often to feed 100% starter?", "Daily.", [])
    store.create_conversation("Quinces")
    assert store.rename_conversation(conv.id, "Bread").title == "Bread"
    with pytest.raises(NotFoundError):
        store.rename_conversation("missing", "x")
    found = store.search_conversations("100%")  # % is text, not a wildcard
    assert [c.id for c in found] == [conv.id] and found[0].matched.startswith("How")
    assert [c.title for c in store.search_conversations("BREAD")] == ["Bread"]
    assert store.search_conversations("10_%") == []
    doc, _, _ = _add(store, "p.pdf", original=b"%PDF-1.4 bytes")
    assert store.document_file(doc.id) == b"%PDF-1.4 bytes"
    store.delete_document(doc.id)
    assert store.document_file(doc.id) is None


def test_m006_upgrades_a_library_with_conversations(db_path):
    """A library made before m006 keeps its conversations: each searches every document, its
    earlier answers have no saved query and are renumbered from [1] like new ones."""
    store = Store(db_path)
    with store.write() as conn:  # back to the schema before m006
        conn.execute("ALTER TABLE conversations DROP COLUMN documents")
        conn.execute("ALTER TABLE messages DROP COLUMN query")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm006_conversation_scope'")
        conn.execute("INSERT INTO conversations (id, title, created, updated) "
                     "VALUES ('c1', 'old', '2026-01-01', '2026-01-01')")
        conn.execute("INSERT INTO messages (id, conversation_id, role, content, sources, created) "
                     "VALUES ('m1', 'c1', 'assistant', 'a [1]', '[]', '2026-01-01')")
        conn.execute(
            "INSERT INTO messages (id, conversation_id, role, content, sources, created) VALUES "
            "('m2', 'c1', 'assistant', 'b [3]. c [2][3]. d [9].', ?, '2026-01-02')",
            ('[{"n": 2, "content": "two"}, {"n": 3, "content": "three"}]',),
        )
    store.close()
    conn = sqlite3.connect(db_path, isolation_level=None)
    assert migrate(conn) == ["m006_conversation_scope"]
    conn.close()

    store = Store(db_path)
    assert store.get_conversation("c1").documents is None
    first, second = store.messages("c1")
    assert first.query is None and first.content == "a [1]"
    # saved before renumbering existed: renumbered like new answers, unknown [9] left as it is
    assert second.content == "b [1]. c [2][1]. d [9]."
    assert second.sources == [{"n": 1, "content": "three"}, {"n": 2, "content": "two"}]
    doc, _, _ = _add(store)
    store.set_conversation_documents("c1", [doc.id, doc.id])
    assert store.get_conversation("c1").documents == [doc.id]  # de-duplicated
    store.set_conversation_documents("c1", [])
    assert store.get_conversation("c1").documents is None
    store.close()


def test_ocr_pages_kept_on_the_document_and_its_chunks(store):
    """m008 / p003: which pages OCR read is stored as a list and flags the chunks on them."""
    plain, _, _ = _add(store, "typed.txt")
    assert plain.ocr_pages == [] and store.get_document(plain.id).ocr_pages == []
    text = "Scanned words. " * 300
    doc, chunks, _ = _add(store, "scan.pdf", text=text, page_count=2, page_starts=(0, 2000),
                          ocr_pages=[2])
    assert store.get_document(doc.id).ocr_pages == [2]
    assert [d.ocr_pages for d in store.list_documents() if d.id == doc.id] == [[2]]
    assert store.find_by_hash("scan.pdf").ocr_pages == [2]
    ids = [c.id for c in store.document_chunks(doc.id)]
    rows = store.chunks_by_ids(ids)
    assert any(r["ocr"] for r in rows.values())
    assert all(r["ocr"] == (r["page_end"] >= 2) for r in rows.values())


def test_conversation_scope_query_and_keep(store):
    """m006 / p003: a conversation's document scope (KEEP leaves it, None clears it), the
    query searched kept on each answer, and the scope's deleted documents left out."""
    from marginalia_core.store.rows import KEEP

    a, _, _ = _add(store, "a.txt")
    b, _, _ = _add(store, "b.txt")
    store.add_exchange("c1", "T", "q1?", "a1", [], query="rewritten q1", documents=[b.id, a.id])
    assert store.get_conversation("c1").documents == [b.id, a.id]
    store.add_exchange("c1", "T", "q2?", "a2", [], documents=KEEP)
    assert store.get_conversation("c1").documents == [b.id, a.id]
    answers = [m for m in store.messages("c1") if m.role == "assistant"]
    assert [m.query for m in answers] == ["rewritten q1", None]
    assert store.missing_documents([a.id, "nope", a.id]) == ["nope"]
    assert store.chunk_ids_of_documents([a.id]) == sorted(
        c.id for c in store.document_chunks(a.id))
    store.delete_document(b.id)
    assert store.get_conversation("c1").documents == [a.id]
    store.add_exchange("c1", "T", "q3?", "a3", [], documents=None)
    assert store.get_conversation("c1").documents is None
    with pytest.raises(NotFoundError):
        store.set_conversation_documents("missing", [a.id])


def test_both_backends_return_the_same_document_record(db_path, pg_database):
    """SQLite and PostgreSQL hand back one record type, field for field the same, for the same
    document from every read (only the moment it was added differs), and its dict form carries
    the documents columns, in order, as the JSON surfaces always showed them; its passages
    come back as equal ``StoredChunk`` records too."""
    from dataclasses import replace

    from marginalia_core.store import open_postgres, open_sqlite
    from marginalia_core.store.records import Document, StoredChunk
    from marginalia_core.store.rows import DOCUMENT_COLUMNS

    health = {"pages": 2, "empty": [2], "garbled": [], "tables": 1}
    records = []
    for store in (open_sqlite(db_path), open_postgres(pg_database)):
        try:
            added, _, _ = _add(store, "scan.pdf", document_id="doc-1", page_count=2,
                               page_starts=(0, 2000), ocr_pages=[2], parse_health=health,
                               source_url="https://example.org/scan.pdf",
                               fetched_at="2026-01-02T03:04:05+00:00")
            reads = [store.get_document("doc-1"), store.find_by_hash("scan.pdf"),
                     *store.list_documents()]
            assert all(type(r) is Document for r in (added, *reads))
            assert reads == [added] * 3
            passages = store.document_chunks("doc-1")
            assert all(type(c) is StoredChunk for c in passages)
            assert [c.idx for c in passages] == list(range(added.chunk_count))
            records.append((added, [replace(c, id=0) for c in passages]))  # ids: per database
        finally:
            store.close()
    (on_sqlite, sqlite_passages), (on_postgres, postgres_passages) = records
    assert replace(on_sqlite, created=on_postgres.created) == on_postgres
    assert sqlite_passages == postgres_passages
    assert on_sqlite.ocr_pages == [2] and on_sqlite.parse_health == health
    assert list(on_sqlite.to_dict()) == [c.strip() for c in DOCUMENT_COLUMNS.split(",")]


def test_both_backends_return_the_same_message_records(db_path, pg_database):
    """A saved exchange reads back as ``Message`` records on either backend, equal field for
    field but for their random ids and insertion times, and equal to what ``add_exchange``
    returned."""
    from dataclasses import replace

    from marginalia_core.store import open_postgres, open_sqlite
    from marginalia_core.store.records import Message

    sources = [{"n": 1, "document_name": "a.md", "content": "Fermat wrote in the margin."}]
    support = [{"sentence": "He wrote [1].", "marks": [1], "supported": True}]
    saved = []
    for store in (open_sqlite(db_path), open_postgres(pg_database)):
        try:
            added = store.add_exchange("c1", "T", "Who wrote?", "He wrote [1].", sources,
                                       query="who wrote in the margin", support=support,
                                       status="stopped")
            read = store.messages("c1")
            assert all(type(m) is Message for m in (*added, *read))
            assert list(added) == read
            saved.append(read)
        finally:
            store.close()
    on_sqlite, on_postgres = saved
    assert [replace(a, id=b.id, created=b.created) for a, b in zip(on_sqlite, on_postgres,
                                                                   strict=True)] == on_postgres
    question, answer = on_sqlite
    assert (question.role, question.sources, question.support) == ("user", [], None)
    assert (answer.sources, answer.support, answer.status) == (sources, support, "stopped")


def test_both_backends_return_the_same_conversation_records(db_path, pg_database):
    """A conversation reads back as a ``Conversation`` (with its document scope) and lists or
    is found as a ``ConversationSummary`` on either backend, equal field for field but for
    the moments it was written; their dict forms keep the keys the API always showed (a
    listed one has no ``matched``)."""
    from dataclasses import replace

    from marginalia_core.store import open_postgres, open_sqlite
    from marginalia_core.store.records import Conversation, ConversationSummary

    seen = []
    for store in (open_sqlite(db_path), open_postgres(pg_database)):
        try:
            doc, _, _ = _add(store, "a.txt", document_id="doc-1")
            store.add_exchange("c1", "Margins", "Who wrote in the margin?", "Fermat [1].",
                               [{"n": 1}], documents=[doc.id, "gone"])
            one = store.get_conversation("c1")
            (listed,) = store.list_conversations()
            (found,) = store.search_conversations("margin")
            assert type(one) is Conversation and one.documents == ["doc-1"]
            assert type(listed) is type(found) is ConversationSummary
            assert (listed.message_count, listed.matched, found.matched) == (
                2, None, "Who wrote in the margin?")
            assert list(one.to_dict()) == ["id", "title", "created", "updated", "documents"]
            assert "matched" not in listed.to_dict() and found.to_dict()["matched"]
            seen.append((one, listed, found))
        finally:
            store.close()
    on_sqlite, on_postgres = seen
    assert [replace(r, created=p.created, updated=p.updated)
            for r, p in zip(on_sqlite, on_postgres, strict=True)] == list(on_postgres)
