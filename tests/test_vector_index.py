"""Dense ranking: the exact in-memory matrix, and the quantised path with its sidecar."""

from __future__ import annotations

import json

import numpy as np
import pytest

from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.providers.embeddings.base import l2_normalize
from marginalia_core.retrieval import vector_index as ranking
from marginalia_core.retrieval.vector_index import Scored, VectorIndex, sidecar_dir, top_k


def _doc(store, name, vectors):
    chunks = chunk_text(" ".join(f"word{i}." for i in range(len(vectors) * 300)))[: len(vectors)]
    assert len(chunks) == len(vectors)
    return store.add_document(
        name=name, mime="text/plain", size=1, content_hash=name, embed_model="m", embed_dim=4,
        chunks=chunks, embeddings=np.asarray(vectors, dtype=np.float32), chunk_target=1400,
        chunk_overlap=200,
    )


def test_top_k_matches_full_sort():
    rng = np.random.default_rng(0)
    scores = rng.random(1000).astype(np.float32)
    ids = np.arange(1000, dtype=np.int64)
    best = top_k(Scored(ids, scores), k=10)
    assert best.chunk_ids.tolist() == np.argsort(-scores)[:10].tolist()
    assert top_k(Scored(ids, scores), k=5000).chunk_ids.size == 1000


def test_threshold_and_ties_are_deterministic():
    ids = np.array([5, 3, 9, 1], dtype=np.int64)
    scores = np.array([0.5, 0.5, 0.2, 0.9], dtype=np.float32)
    best = top_k(Scored(ids, scores), k=3, threshold=0.3)
    assert best.chunk_ids.tolist() == [1, 3, 5]


def test_index_refreshes_when_documents_change(store):
    index = VectorIndex(store, "m", 4)
    assert len(index) == 0
    doc = _doc(store, "a", l2_normalize(np.eye(4)[:3]))
    q = l2_normalize(np.array([0, 1, 0.1, 0], dtype=np.float32))
    hit = index.search(q, k=1)
    assert len(index) == 3 and hit.scores[0] > 0.99
    store.delete_document(doc.id)
    assert index.search(q, k=1).chunk_ids.size == 0  # never serves a deleted document


def test_index_does_not_reload_without_changes(store):
    _doc(store, "a", l2_normalize(np.eye(4)[:2]))
    index = VectorIndex(store, "m", 4)
    index.search(np.ones(4, dtype=np.float32), k=1)
    snapshot = index._snapshot
    index.search(np.ones(4, dtype=np.float32), k=1)
    assert index._snapshot is snapshot


def test_additions_are_appended_without_a_full_reload(store, monkeypatch):
    _doc(store, "a", l2_normalize(np.eye(4)[:2]))
    index = VectorIndex(store, "m", 4)
    assert len(index) == 2
    calls = []
    real = store.load_vectors
    monkeypatch.setattr(store, "load_vectors", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    _doc(store, "b", l2_normalize(np.eye(4)[2:]))
    assert len(index) == 4 and calls[-1].get("after_id", 0) > 0  # only the new rows were read
    ids, matrix = index._snapshot
    assert ids.tolist() == sorted(ids.tolist()) and matrix.shape == (4, 4)
    q = np.array([0, 0, 0, 1], dtype=np.float32)
    assert index.search(q, k=1).scores[0] > 0.99
    # the next addition lands in the spare capacity: earlier rows are not copied again
    _doc(store, "c", l2_normalize(np.array([[1, 1, 0, 0]], dtype=np.float32)))
    assert len(index) == 5
    grown_ids, grown = index._snapshot
    assert np.shares_memory(grown, matrix) and np.shares_memory(grown_ids, ids)
    assert np.array_equal(grown[:4], matrix)
    # a deletion forces a full reload, and the deleted rows are gone
    store.delete_document(next(d.id for d in store.list_documents() if d.name == "b"))
    assert len(index) == 3 and calls[-1].get("after_id", 0) == 0


# --------------------------------------------------------------------------- quantised path

QDIM = 384


def _clustered(n: int, seed: int, dim: int = QDIM) -> np.ndarray:
    """Real-data-like vectors: clustered, anisotropic (decaying spectrum), sharing a mean."""
    basis = np.linalg.qr(np.random.default_rng(7).standard_normal((dim, dim)))[0]
    spectrum = np.arange(1, dim + 1) ** -0.6
    centers = (np.random.default_rng(11).standard_normal((60, dim)) * spectrum) @ basis.T
    centers += 0.3 * np.random.default_rng(13).standard_normal(dim)
    rng = np.random.default_rng(seed)
    x = centers[rng.integers(0, len(centers), n)]
    x = x + 0.5 * (rng.standard_normal((n, dim)) * spectrum) @ basis.T
    return l2_normalize(x.astype(np.float32))


def _bulk(store, name, vectors):
    """A document of ``len(vectors)`` tiny chunks (no chunker: thousands of rows)."""
    from marginalia_core.ingest.chunking import Chunk

    chunks = [Chunk(idx=i, start=0, end=6, text=f"c{i} {name}", page_start=1, page_end=1)
              for i in range(len(vectors))]
    return store.add_document(
        name=name, mime="text/plain", size=1, content_hash=name, embed_model="q", embed_dim=QDIM,
        chunks=chunks, embeddings=vectors, chunk_target=1400, chunk_overlap=200,
    )


@pytest.fixture
def big(store, monkeypatch):
    """12,000 clustered vectors in 12 documents, quantised above 5,000 rows, and a pre-selection
    as tight as at 1M chunks (2 % here, 0.5 % there): agreement must come from the codes."""
    monkeypatch.setattr(ranking, "PRESELECT_MIN", 240)
    monkeypatch.setattr(ranking, "RESCORE_MIN", 40)
    x = _clustered(12_000, seed=1)
    for d in range(12):
        _bulk(store, f"doc{d}", x[d * 1000 : (d + 1) * 1000])
    ids = np.asarray(sorted(r[0] for r in store.conn.execute("SELECT id FROM chunks")), np.int64)
    return store, x, ids


def _recall(index, x, ids, queries, k=10):
    hits = 0
    for q in queries:
        exact = set(ids[np.argsort(-(x @ q), kind="stable")[:k]].tolist())
        hits += len(exact & set(index.search(q, k=k).chunk_ids.tolist()))
    return hits / (k * len(queries))


def test_quantised_search_agrees_with_exact_ranking(big):
    store, x, ids = big
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert index.quantised and len(index) == 12_000
    queries = _clustered(100, seed=2)
    assert _recall(index, x, ids, queries) >= 0.99
    # returned scores are exact cosines, best first, and the threshold applies to them
    best = index.search(queries[0], k=10, threshold=0.0)
    rows = x[np.searchsorted(ids, best.chunk_ids)]
    assert np.allclose(best.scores, rows @ queries[0], atol=1e-6)
    assert (np.diff(best.scores) <= 0).all()
    assert index.search(queries[0], k=10, threshold=1.01).chunk_ids.size == 0
    # resident: codes (1 bit + 1 byte a dimension) and ids, at most a third of float32
    assert index.nbytes <= x.nbytes / 3
    assert index.cosine(queries[0], [int(ids[5]), 10**9]) == [pytest.approx(float(x[5] @ queries[0]), abs=1e-6), None]


def test_small_library_keeps_the_exact_path(big):
    store, x, ids = big
    index = VectorIndex(store, "q", QDIM)  # default threshold (100k) is above 12k rows
    assert not index.quantised
    q = _clustered(1, seed=3)[0]
    assert index.search(q, k=10).chunk_ids.tolist() == ids[np.argsort(-(x @ q), kind="stable")[:10]].tolist()
    assert sidecar_dir(store.path, "q", QDIM).exists() is False
    # growing past the threshold swaps the float32 matrix for codes fitted on it
    growing = VectorIndex(store, "q", QDIM, quantise_above=12_500)
    assert not growing.quantised
    more = _clustered(1000, seed=10)
    _bulk(store, "more", more)
    assert growing.quantised and growing.last_load["how"] == "quantised from the exact matrix"
    assert len(growing) == 13_000 and growing._snapshot[1].size == 0
    assert growing.search(more[5], k=1).scores[0] > 0.999
    assert (sidecar_dir(store.path, "q", QDIM) / "meta.json").exists()


def test_additions_append_and_deletions_are_never_served(big):
    store, x, ids = big
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert index.quantised
    first_blocks = [b.codes for b in index._codes.blocks]
    extra = _clustered(1500, seed=4)
    _bulk(store, "late", extra)
    q = extra[700]
    hit = index.search(q, k=1)
    assert len(index) == 13_500 and hit.scores[0] > 0.999
    # earlier blocks are the very same arrays: the addition copied nothing
    assert all(a is b.codes for a, b in zip(first_blocks, index._codes.blocks))
    assert "1500 added" in index.last_load["how"]
    small = _bulk(store, "small", np.repeat(extra[3:4], 20, axis=0))
    small_ids = set(store.vector_ids("q", QDIM)[1][-20:].tolist())
    assert small_ids & set(index.search(extra[3], k=50).chunk_ids.tolist())
    # a small deletion tombstones its rows (no copy) and the sidecar records them
    store.delete_document(small.id)
    assert len(index) == 13_500 and "20 deleted" in index.last_load["how"]
    assert index._codes.dead == 20
    assert not small_ids & set(index.search(extra[3], k=50).chunk_ids.tolist())
    again = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(again) == 13_500 and again.last_load["how"].startswith("sidecar")
    assert not small_ids & set(again.search(extra[3], k=50).chunk_ids.tolist())
    # a big one (over COMPACT_DEAD_FRACTION) compacts the codes and rewrites the sidecar
    late = next(d for d in store.list_documents() if d.name == "late")
    late_ids = set(store.vector_ids("q", QDIM)[1][-1500:].tolist())
    store.delete_document(late.id)
    assert len(index) == 12_000 and index._codes.dead == 0
    assert not late_ids & set(index.search(q, k=50).chunk_ids.tolist())
    assert _recall(index, x, ids, _clustered(50, seed=5)) >= 0.99
    restarted = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(restarted) == 12_000 and restarted.last_load["how"].startswith("sidecar")
    assert set(restarted._codes.alive_ids().tolist()) == set(ids.tolist())


def test_restart_loads_codes_from_the_sidecar_without_reading_vectors(big, monkeypatch):
    store, x, ids = big
    VectorIndex(store, "q", QDIM, quantise_above=5_000).search(x[0], k=1)
    meta = json.loads((sidecar_dir(store.path, "q", QDIM) / "meta.json").read_text())
    assert meta["rows"] == 12_000 and meta["generation"] == store.generation()

    def no_full_load(*a, **kw):
        raise AssertionError("the float32 matrix was loaded although the sidecar is current")

    monkeypatch.setattr(store, "load_vectors", no_full_load)
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert index.quantised and index.last_load["how"].startswith("sidecar")
    assert _recall(index, x, ids, _clustered(50, seed=6)) >= 0.99
    # rows added while no index was running are caught up from the database, and appended
    _bulk(store, "meanwhile", _clustered(300, seed=7))
    later = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(later) == 12_300 and "300 added" in later.last_load["how"]
    assert json.loads((sidecar_dir(store.path, "q", QDIM) / "meta.json").read_text())["rows"] == 12_300


def _rebuilt(store):
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert index.quantised and index.last_load["how"] == "built from the database", index.last_load
    return index


def test_stale_or_foreign_sidecar_is_rebuilt_from_the_database(big):
    store, x, ids = big
    VectorIndex(store, "q", QDIM, quantise_above=5_000).search(x[0], k=1)
    side = sidecar_dir(store.path, "q", QDIM)
    meta_path = side / "meta.json"
    meta = json.loads(meta_path.read_text())
    queries = _clustered(30, seed=8)

    # codes of another database that sat at this path (different library token)
    meta_path.write_text(json.dumps({**meta, "library": meta["library"] + 1}))
    assert _recall(_rebuilt(store), x, ids, queries) >= 0.99

    # codes that do not match the stored vectors (spot check)
    meta = json.loads(meta_path.read_text())
    codes_file = side / f"{meta['epoch']}.codes"
    codes_file.write_bytes(bytes(codes_file.stat().st_size))
    assert _recall(_rebuilt(store), x, ids, queries) >= 0.99

    # files cut short
    meta = json.loads(meta_path.read_text())
    with open(side / f"{meta['epoch']}.bits", "r+b") as fh:
        fh.truncate(100)
    _rebuilt(store)

    # a sidecar ahead of the database (restored from a backup) is not trusted either
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "generation": meta["generation"] + 5}))
    _rebuilt(store)


def test_bytes_left_by_a_killed_writer_are_ignored_and_overwritten(big):
    store, x, ids = big
    VectorIndex(store, "q", QDIM, quantise_above=5_000).search(x[0], k=1)
    side = sidecar_dir(store.path, "q", QDIM)
    meta = json.loads((side / "meta.json").read_text())
    for ext in ("ids", "bits", "codes"):
        with open(side / f"{meta['epoch']}.{ext}", "ab") as fh:
            fh.write(b"\x07" * 333)  # half a row appended, meta never updated
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(index) == 12_000 and index.last_load["how"].startswith("sidecar")
    _bulk(store, "after-crash", _clustered(10, seed=9))
    assert len(index) == 12_010
    fresh = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(fresh) == 12_010 and fresh.last_load["how"].startswith("sidecar")
    assert set(fresh._codes.alive_ids().tolist()) == set(index._codes.alive_ids().tolist())


def test_migration_gives_each_library_its_own_token(tmp_path):
    from marginalia_core.store.sqlite import Store

    a, b = Store(tmp_path / "a.db"), Store(tmp_path / "b.db")
    try:
        assert a.library_token() > 0 and b.library_token() > 0
        assert a.library_token() != b.library_token()
    finally:
        a.close()
        b.close()


def test_sidecar_opens_as_memory_maps_and_rescores_from_the_file(big):
    """A restart maps the codes (nothing copied into the process) and reads float32 rows from
    the file only for the candidates; the result equals exact ranking."""
    store, x, ids = big
    VectorIndex(store, "q", QDIM, quantise_above=5_000).search(x[0], k=1)
    index = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert index.quantised and index.last_load["how"].startswith("sidecar")
    for b in index._codes.blocks:
        assert not b.codes.flags.owndata and not b.bits_t.flags.owndata  # views of mappings
        assert isinstance(b.vecs, ranking.RowFile)
    assert index.nbytes <= x.nbytes / 3 and index._codes.float32_file_bytes == x.nbytes
    q = _clustered(1, seed=11)[0]
    best = index.search(q, k=10)
    assert best.chunk_ids.tolist() == ids[np.argsort(-(x @ q), kind="stable")[:10]].tolist()
    assert np.allclose(best.scores, x[np.searchsorted(ids, best.chunk_ids)] @ q, atol=1e-6)
    rows = index._codes.blocks[0].vecs[np.array([3, 0, 2999])]  # any order, scattered or dense
    assert np.array_equal(rows, x[[3, 0, 2999]])


def test_a_sidecar_that_disagrees_with_the_database_is_rebuilt(big):
    store, x, ids = big
    VectorIndex(store, "q", QDIM, quantise_above=5_000).search(x[0], k=1)
    side = sidecar_dir(store.path, "q", QDIM)
    meta_path = side / "meta.json"
    # a lost tail is simply caught up from the database
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "rows": meta["rows"] - 100}))
    again = VectorIndex(store, "q", QDIM, quantise_above=5_000)
    assert len(again) == 12_000 and again.last_load["how"] == "sidecar + 100 added", again.last_load
    # rows marked deleted that the database still holds, counters matching: the row count
    # disagrees with the documents', so the codes are rebuilt
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "dead": ids[500:600].tolist()}))
    assert len(_rebuilt(store)) == 12_000
    # float32 rows that are not this library's (the codes still agree with each other)
    meta = json.loads(meta_path.read_text())
    f32 = side / f"{meta['epoch']}.f32"
    data = np.fromfile(f32, "<f4").reshape(-1, QDIM)
    np.roll(data, 1, axis=0).tofile(f32)
    (side / f"{meta['epoch']}.codes").write_bytes(
        ranking.Quantiser(np.asarray(meta["mean"], np.float32), np.asarray(meta["scale"], np.float32))
        .encode(np.roll(data, 1, axis=0))[1].tobytes())
    index = _rebuilt(store)
    assert _recall(index, x, ids, _clustered(20, seed=12)) >= 0.99


def test_the_preselection_cut_keeps_every_row_closer_than_the_cut():
    rng = np.random.default_rng(5)
    for n, want in [(100_000, 500), (30_000, 2_000), (5_000, 5_000), (1_000, 7)]:
        dist = rng.binomial(384, 0.5, n).astype(np.uint16)
        dist[rng.choice(n, n // 50, replace=False)] = np.iinfo(np.uint16).max  # dead rows
        pos = ranking._smallest(dist, want, 384)
        assert (np.diff(pos) > 0).all() and (dist[pos] <= 384).all()
        live = int((dist <= 384).sum())
        assert min(want, live) <= len(pos) <= max(2 * want, 1)
        cut = int(dist[pos].max())
        assert set(np.flatnonzero(dist < cut).tolist()) <= set(pos.tolist())
