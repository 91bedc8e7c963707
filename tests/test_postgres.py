"""What only the PostgreSQL store has: its own migrations under an advisory lock, a partial HNSW
index per embedder, ranking in the database, masked URLs, ``migrate-store`` from a SQLite
library with nothing lost, and the CLI and the app running on it. (The behaviour shared with
SQLite runs on both backends in test_store, test_retrieval, test_ingestion, test_chat,
test_concurrency and test_crash_safety.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import streamlit as st
from conftest import ROOT, SAMPLES, offline_cli_env, pg_url
from streamlit.testing.v1 import AppTest

from marginalia_core.config import Settings, load_settings, mask_url
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.lab import RetrievalLab
from marginalia_core.store.sqlite import Store

psycopg = pytest.importorskip("psycopg")
from marginalia_core.store.postgres import (  # noqa: E402
    PG_MIGRATIONS,
    MigrationRefused,
    PostgresStore,
    applied_pg,
    hnsw_index_name,
    import_sqlite,
)

FERMAT = "What did Fermat write in the margin?"


@pytest.fixture
def empty_pg_database(pg_server):
    """A database with no schema at all (not the migrated template)."""
    name = "fresh_" + str(abs(hash(threading.get_ident())) % 10**8)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_url(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _add(store, name: str, dim: int = 8, model: str = "m", seed: int = 0):
    chunks = chunk_text(f"{name} words here. " * 200)
    vectors = np.random.default_rng(seed).normal(size=(len(chunks), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return store.add_document(
        name=name, mime="text/plain", size=1, content_hash=name, embed_model=model,
        embed_dim=dim, chunks=chunks, embeddings=vectors, chunk_target=1400, chunk_overlap=200,
    ), vectors


def test_processes_opening_a_new_database_at_once_apply_each_migration_once(empty_pg_database):
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []

    def open_one() -> None:
        try:
            stores.append(PostgresStore(empty_pg_database))
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert applied_pg(stores[0].raw) == [name for name, _ in PG_MIGRATIONS]
    assert stores[0].generation() == 0
    for s in stores:
        s.close()


def test_each_embedder_gets_its_own_hnsw_index_and_ranks_like_numpy(pg_database):
    store = PostgresStore(pg_database)
    _, va = _add(store, "a.txt", dim=8, model="m1", seed=1)
    _add(store, "b.txt", dim=16, model="m2", seed=2)
    indexes = {r[0] for r in store.raw.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'chunks'")}
    assert {hnsw_index_name("m1/8"), hnsw_index_name("m2/16")} <= indexes
    _, ids, matrix = store.load_vectors("m1", 8)
    q = va[0]
    want = ids[np.argsort(-(matrix @ q), kind="stable")][:5].tolist()
    exact = store.nearest("m1", 8, q, k=5, exact=True)
    assert [c for c, _ in exact] == want
    assert exact[0][1] == pytest.approx(1.0, abs=1e-5)
    approx = store.nearest("m1", 8, q, k=5, ef_search=100)
    assert approx[0][0] == want[0]
    # the other embedder's chunks are never candidates
    assert set(c for c, _ in store.nearest("m1", 8, q, k=500)) <= set(ids.tolist())
    store.close()


def test_urls_with_passwords_are_masked(pg_server):
    url = "postgresql://marg:s3cret-pw@db.example.invalid:5432/lib"
    assert mask_url(url) == "postgresql://marg:***@db.example.invalid:5432/lib"
    settings = load_settings({"MARGINALIA_DATABASE_URL": url})
    assert settings.database_url == url and "s3cret" not in repr(settings)
    with pytest.raises(ValueError, match="postgresql://"):
        load_settings({"MARGINALIA_DATABASE_URL": "mysql://x"})
    # a refused connection names the server, never the password
    bad = pg_url(pg_server, "no_such_db").replace("postgres:@", "postgres:hunter2@")
    with pytest.raises(ConnectionError) as info:
        PostgresStore(bad)
    assert "hunter2" not in str(info.value) and "***" in str(info.value)


def _sqlite_library(tmp_path, local_embedder) -> Settings:
    settings = Settings(db_path=str(tmp_path / "lib.db"), embedder="local", answerer="extractive")
    from marginalia_core.workspace import Workspace

    ws = Workspace(settings)
    ws.__dict__["embedder"] = local_embedder
    for p in sorted(SAMPLES.iterdir()):
        if p.suffix in (".md", ".pdf"):
            end = list(ingest_bytes(ws.store, ws.embedder, settings, p.name, p.read_bytes()))[-1]
            assert end["type"] == "done", end
    kept = ws.documents()[0].id
    list(ws.ask(FERMAT, documents=[kept]))  # a conversation scope and a saved query (m006)
    ws.store.delete_document(ws.documents()[-1].id)  # ids with a gap, as real libraries have
    ws.store.save_library_settings({"top_k": 4})  # library settings (m010)
    csv = tmp_path / "q.csv"
    csv.write_text("question,document,page\nWho wrote in the margin?,how-marginalia-works.md,\n")
    RetrievalLab(ws).import_set(csv, name="margins")
    ws.close()
    return settings


def test_migrate_store_copies_a_sqlite_library_with_nothing_lost(
    tmp_path, local_embedder, pg_database
):
    settings = _sqlite_library(tmp_path, local_embedder)
    proc = subprocess.run(
        [sys.executable, "-m", "marginalia_core", "migrate-store", "--db", settings.db_path,
         "--to", pg_database],
        cwd=ROOT, env=offline_cli_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["type"] == "done"
    assert all(c["sqlite"] == c["postgresql"] for c in report["counts"].values())
    assert report["counts"]["chunks"]["sqlite"] > 3 and report["counts"]["messages"]["sqlite"] == 2
    assert report["vectorsEqual"] == report["vectorsCompared"] > 0

    # the same library answers the same way: documents, chunk ids, vectors, dense ranking
    src, dst = Store(settings.db_path), PostgresStore(pg_database)
    assert src.list_documents() == dst.list_documents()
    (_, ids_a, m_a), (_, ids_b, m_b) = (
        s.load_vectors(local_embedder.model, local_embedder.dimension) for s in (src, dst))
    assert np.array_equal(ids_a, ids_b) and np.array_equal(m_a, m_b)
    assert [m.content for c in src.list_conversations() for m in src.messages(c.id)] == \
        [m.content for c in dst.list_conversations() for m in dst.messages(c.id)]
    # conversation scope, each answer's query and the applied settings come along
    (conv,) = src.list_conversations()
    assert src.get_conversation(conv.id).documents is not None
    assert src.get_conversation(conv.id) == dst.get_conversation(conv.id)
    assert [m.query for m in src.messages(conv.id)] == \
        [m.query for m in dst.messages(conv.id)]
    assert any(m.query for m in dst.messages(conv.id))
    assert dst.library_settings() == src.library_settings() == {"top_k": 4}
    # new chunks continue after the copied ids
    doc, _ = _add(dst, "after.txt", dim=local_embedder.dimension, model=local_embedder.model)
    assert min(c.id for c in dst.document_chunks(doc.id)) > int(ids_a.max())
    # a second copy into a database that holds a library is refused, nothing written
    with pytest.raises(MigrationRefused):
        import_sqlite(src, dst)
    src.close()
    dst.close()


def test_cli_ingest_search_ask_on_postgres(tmp_path, pg_database):
    env = offline_cli_env() | {"MARGINALIA_DATABASE_URL": pg_database,
                               "MARGINALIA_EMBEDDER": "local", "MARGINALIA_ANSWERER": "extractive"}

    def call(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "marginalia_core", *argv], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)

    ingest = call("ingest", *(str(p) for p in sorted(SAMPLES.glob("*.md"))))
    assert ingest.returncode == 0, ingest.stderr
    search = call("search", "Fermat margin")
    assert search.returncode == 0, search.stderr
    hits = [json.loads(line) for line in search.stdout.splitlines()]
    assert hits and "marginalia" in json.dumps(hits[0])
    ask = call("ask", FERMAT)
    events = [json.loads(line) for line in ask.stdout.splitlines()]
    assert ask.returncode == 0 and events[0]["type"] == "meta" and events[-1]["type"] == "done"
    assert events[0]["sources"]
    assert not (tmp_path / "data").exists()  # no SQLite file was made on the side


def test_the_app_runs_on_postgres(pg_database, monkeypatch, local_embedder):
    monkeypatch.setenv("MARGINALIA_DATABASE_URL", pg_database)
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    st.cache_data.clear()
    store = PostgresStore(pg_database)
    for p in sorted(SAMPLES.glob("*.md")):
        end = list(ingest_bytes(store, local_embedder, load_settings(), p.name, p.read_bytes()))
        assert end[-1]["type"] == "done"
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        assert not at.exception
        at.chat_input[0].set_value(FERMAT).run()
        assert not at.exception
        assert [m.name for m in at.chat_message] == ["user", "assistant"]
        assert "Fermat" in at.chat_message[1].markdown[0].value
        convs = store.list_conversations()
        assert len(convs) == 1 and convs[0].title == FERMAT  # saved in PostgreSQL
        shown = " ".join(m.value for m in at.sidebar.markdown) + " ".join(
            c.value for c in at.caption) + " ".join(c.value for c in at.sidebar.caption)
        assert "postgres:@" not in shown  # the raw URL is never on screen
    finally:
        store.close()
        st.cache_resource.clear()
        st.cache_data.clear()


def test_applied_settings_reach_every_workspace_on_postgres(pg_database, local_embedder):
    """The lab's "Apply to Chat" on a PostgreSQL library: the settings are saved in it, and a
    second Workspace (another session or process) reads them over its defaults."""
    from marginalia_core.workspace import Workspace

    defaults = Settings(db_path=":memory:", database_url=pg_database, embedder="local",
                        answerer="extractive").with_overrides(top_k=5)
    first, second = Workspace(defaults), Workspace(defaults)
    for ws in (first, second):
        ws.__dict__["embedder"] = local_embedder
    try:
        assert second.settings.retrieval.top_k == 5
        list(first.apply_settings({"top_k": 3, "retrieval_mode": "lexical"}))
        assert first.settings.retrieval.top_k == 3 and first.applied_settings()["top_k"] == 3
        assert (second.settings.retrieval.top_k, second.settings.retrieval.mode) == (3, "lexical")
        list(second.apply_settings({}))  # back to the defaults
        assert first.settings.retrieval.top_k == 5
    finally:
        first.close()
        second.close()


def test_full_text_folds_accents_and_p005_reindexes_existing_rows(empty_pg_database):
    """As SQLite's FTS5 (remove_diacritics): "cafe" finds "café" and back; rows written before
    p005 are found too (the migration recomputes their tsvector)."""
    from marginalia_core.store.postgres import MIGRATIONS_TABLE
    from marginalia_core.store.rows import now_iso

    with psycopg.connect(empty_pg_database, autocommit=True) as conn, conn.transaction():
        conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, fn in PG_MIGRATIONS:
            if name.startswith("p005"):
                break
            fn(conn)
            conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (%s, %s)", (name, now_iso()))
    with psycopg.connect(empty_pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO documents (id, name, mime, size, chunk_count, content_hash, embed_model, "
            "embed_dim, chunk_target, chunk_overlap, created) VALUES "
            "('old', 'old.txt', 'text/plain', 1, 1, 'h', 'm', 8, 1400, 200, 'now')")
        conn.execute(
            "INSERT INTO chunks (document_id, idx, content, start, \"end\", page_start, page_end, "
            "embedder, embedding) VALUES ('old', 0, 'Un café crème à Paris', 0, 20, 1, 1, 'm/8', "
            "'[1,0,0,0,0,0,0,0]')")
        before = conn.execute(
            "SELECT count(*) FROM chunks WHERE tsv @@ websearch_to_tsquery('english', 'cafe')"
        ).fetchone()[0]
    assert before == 0  # the p001 column kept the accent
    store = PostgresStore(empty_pg_database)  # applies p005 (and the later ones)
    try:
        assert "p005_fold_diacritics" in applied_pg(store.raw)
        old_chunk = store.chunk_ids_of_documents(["old"])
        assert [c for c, _ in store.bm25(["cafe"], limit=5)] == old_chunk
        assert [c for c, _ in store.bm25(["creme", "paris"], limit=5, require_all=True)] == old_chunk
        doc, _ = _add(store, "other.txt")
        store.raw.execute(
            "UPDATE chunks SET content = 'a naive resume of the facade' WHERE document_id = %s "
            "AND idx = 0", (doc.id,))
        first = store.chunk_ids_of_documents([doc.id])[0]
        assert [c for c, _ in store.bm25(["naïve", "résumé", "façade"], limit=5, require_all=True)] == [first]
        assert store.chunks_containing("résumé", [first, *old_chunk]) == [first]
        total, counts = store.term_chunk_counts(["café", "cafe", "naïve"])
        assert counts == {"café": 1, "cafe": 1, "naïve": 1} and total >= 2
        # ligatures of PDF text fold too
        assert store.raw.execute("SELECT marginalia_fold('ﬁnal Ångström')").fetchone()[0] == "final Angstrom"
    finally:
        store.close()


def _plan(store, q, **kw) -> str:
    """The plan of ``nearest``'s own statement. ef_search 10: on a table this small a wider
    search costs more than sorting every row, and the planner rightly sorts (at 100k rows it
    walks the index at any ef_search: bench_backends)."""
    return "\n".join(line for line, _ in store.nearest("m", 16, q, k=10, explain=True, ef_search=10, **kw))


def test_the_retriever_ranks_in_the_database_with_the_hnsw_index(pg_database, monkeypatch):
    """On PostgreSQL dense search is an ORDER BY <=> LIMIT k over the HNSW index (no vector is
    loaded into the process), equal to exact ranking on small data, scoped to documents
    correctly both ways (a small scope ranked exactly, a big one through the index with
    iterative scans)."""
    from marginalia_core.ingest.chunking import Chunk
    from marginalia_core.retrieval.vector_index import ServerIndex, dense_index
    from marginalia_core.store import postgres

    store = PostgresStore(pg_database)
    docs, parts = [], []
    for i in range(3):  # 3 x 1,000 rows: enough that the planner walks the index
        vecs = np.random.default_rng(i).normal(size=(1000, 16)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        chunks = [Chunk(idx=j, start=0, end=6, text=f"c{j} d{i}", page_start=1, page_end=1)
                  for j in range(1000)]
        docs.append(store.add_document(
            name=f"d{i}.txt", mime="text/plain", size=1, content_hash=f"d{i}", embed_model="m",
            embed_dim=16, chunks=chunks, embeddings=vecs, chunk_target=1400, chunk_overlap=200))
        parts.append(vecs)
    store.raw.execute("ANALYZE")
    _, ids, matrix = store.load_vectors("m", 16)
    doc_of = {c: d.id for d in docs for c in store.chunk_ids_of_documents([d.id])}

    def no_load(*a, **kw):
        raise AssertionError("vectors were loaded into the process")

    monkeypatch.setattr(store, "load_vectors", no_load)
    monkeypatch.setattr(store, "vector_pages", no_load)
    index = dense_index(store, "m", 16)
    assert isinstance(index, ServerIndex) and len(index) == len(ids)
    queries = np.random.default_rng(9).normal(size=(20, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def exact(q, scope=None, k=10):
        keep = np.asarray([scope is None or doc_of[int(c)] in scope for c in ids])
        s = matrix[keep] @ q
        order = np.lexsort((ids[keep], -s))[:k]
        return ids[keep][order].tolist(), s[order]

    hnsw = hnsw_index_name("m/16")
    assert f"Index Scan using {hnsw}" in _plan(store, queries[0])
    for q in queries:
        got = index.search(q, k=10)
        want, scores = exact(q)
        assert got.chunk_ids.tolist() == want
        assert np.allclose(got.scores, scores, atol=1e-5)
    # threshold applies to the cosine, as on SQLite
    assert (index.search(queries[0], k=10, threshold=0.3).scores >= 0.3).all()
    scope = [docs[1].id]
    for exact_below in (postgres.EXACT_SCOPE_ROWS, 0):  # small scope exact / HNSW + filter
        monkeypatch.setattr(postgres, "EXACT_SCOPE_ROWS", exact_below)
        assert (hnsw in _plan(store, queries[0], documents=scope)) == (exact_below == 0)
        for q in queries[:5]:
            got = index.search(q, k=10, documents=scope)
            assert got.chunk_ids.tolist() == exact(q, set(scope))[0]
        # a scope of one document still fills k from it (iterative scan: the filter keeps ~1/3)
        assert len(index.search(queries[0], k=len(parts[1]), documents=scope).chunk_ids) == len(parts[1])
    assert index.search(queries[0], k=5, documents=[]).chunk_ids.size == 0
    # cosines computed in the database; chunks of other embedders or unknown ids are None
    some = [int(ids[3]), int(ids[7]), 10**9]
    got = index.cosine(queries[0], some)
    assert got[:2] == [pytest.approx(float(matrix[3] @ queries[0]), abs=1e-5),
                       pytest.approx(float(matrix[7] @ queries[0]), abs=1e-5)] and got[2] is None
    full = index.score_all(queries[0])
    assert full.chunk_ids.tolist() == ids.tolist() and np.allclose(full.scores, matrix @ queries[0], atol=1e-5)
    store.close()
