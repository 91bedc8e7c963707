"""Dense ranking over the in-memory matrix."""

from __future__ import annotations

import numpy as np

from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.providers.embeddings.base import l2_normalize
from marginalia_core.retrieval.ranking import Scored, VectorIndex, top_k


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
    store.delete_document(doc["id"])
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
    # a deletion forces a full reload, and the deleted rows are gone
    store.delete_document(store.list_documents()[-1]["id"])
    assert len(index) == 2 and calls[-1].get("after_id", 0) == 0
