"""Retriever: dense, lexical and hybrid modes over a real index; embedder mismatch detection."""

from __future__ import annotations

import pytest

from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.retrieval import lexical

pytestmark = pytest.mark.both_backends

DOCS = {
    "bees.md": "Honey bees communicate the location of flowers with a waggle dance. "
    "The angle of the dance encodes the direction relative to the sun.",
    "volcano.md": "Basaltic lava flows are fluid because of their low silica content. "
    "Stratovolcanoes erupt viscous andesite explosively.",
    "codes.md": "Error code ZX-4471 means the cooling fan has stalled. "
    "Replace the fan assembly and reset the controller.",
}


@pytest.fixture
def indexed(workspace):
    for name, text in DOCS.items():
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, text.encode()))
        assert events[-1]["type"] == "done"
    return workspace


@pytest.mark.parametrize("mode", ["hybrid", "dense", "lexical"])
def test_each_mode_finds_the_right_document(indexed, mode):
    hits = indexed.retriever.search("How do bees tell each other where flowers are?", mode=mode)
    assert hits and hits[0].document_name == "bees.md"
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(0 <= h.score <= 1 for h in hits)


def test_hybrid_rescues_exact_identifier(indexed):
    hits = indexed.retriever.search("ZX-4471", mode="hybrid", threshold=0.0)
    assert hits[0].document_name == "codes.md"
    assert hits[0].lexical_score and hits[0].lexical_score > 0


def test_threshold_drops_unrelated(indexed):
    hits = indexed.retriever.search("quarterly tax filing deadlines", threshold=0.5)
    assert hits == []
    table = indexed.retriever.score_table("quarterly tax filing deadlines", threshold=0.5)
    assert len(table) == 3 and not any(row["passes"] for row in table)
    assert [r["rank"] for r in table] == [1, 2, 3]
    assert table[0]["score"] >= table[-1]["score"]


def test_filled_lists_give_every_candidate_both_scores(indexed):
    ret = indexed.retriever
    query = "lava silica viscosity"
    vector = ret.embedder.embed_query(query)
    scored = ret.index.score_all(vector)
    top = list(zip(scored.chunk_ids.tolist(), scored.scores.tolist()))
    dense, lex = lexical.filled_lists(ret.store, query, top[:1],
                                      lambda ids: ret.index.cosine(vector, list(ids)))
    assert {c for c, _ in dense} == {c for c, _ in lex}
    assert dict(lex)[dense[0][0]] >= 0.0


def test_other_embedder_is_reported_and_excluded(indexed):
    store = indexed.store
    doc = store.list_documents()[0]
    store.conn.execute("UPDATE documents SET embed_model = 'other-model' WHERE id = ?", (doc.id,))
    store.conn.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
    problem = indexed.retriever.mismatch()
    assert problem is not None and "Re-index" in problem.message and "other-model" in problem.message
    assert [d.id for d in indexed.retriever.stale_documents()] == [doc.id]
    names = {h.document_name for h in indexed.retriever.search("anything at all", threshold=-1.0, k=50)}
    assert doc.name not in names


def test_hybrid_keeps_an_all_terms_keyword_match_below_the_threshold(indexed):
    # the small embedder barely relates "ZX-4471" to anything; the keyword match carries it
    dense = indexed.retriever.search("ZX-4471", mode="dense", threshold=0.9)
    hybrid = indexed.retriever.search("ZX-4471", mode="hybrid", threshold=0.9)
    assert dense == []
    assert [h.document_name for h in hybrid] == ["codes.md"]
    # a query whose terms no single chunk contains together is not rescued
    assert indexed.retriever.search("ZX-4471 volcano", mode="hybrid", threshold=0.9) == []


def test_candidates_report_the_weight_hybrid_uses(indexed):
    """``Candidates.query_alpha`` is the weight the fused order is sorted by: ranking with a
    fixed weight equal to it gives the same order as the adapted fusion."""
    cands = indexed.retriever.candidates("lava silica viscosity and explosive eruptions")
    used = cands.query_alpha(0.6)
    assert 0.0 < used < 1.0
    adapted = [r.chunk_id for r in cands.table(0.6)]
    fixed = [c for c, _ in lexical.fuse(
        list(zip(cands.chunk_ids, cands.cosine)), list(zip(cands.chunk_ids, cands.bm25)),
        alpha=used, coverage=dict(zip(cands.chunk_ids, cands.coverage)), adaptive_power=0,
        phrase=cands.phrase_of())]
    assert adapted == fixed
    assert cands.query_alpha(1.0) == 1.0 and cands.query_alpha(0.0) == 0.0


def test_candidates_carry_the_query_phrase_and_the_table_shows_it(indexed):
    """A passage holding the query's words side by side ("waggle dance") carries its phrase
    share into the fused score; the others carry none."""
    cands = indexed.retriever.candidates("waggle dance of the honey bees")
    shares = cands.phrase_of()
    names = {m["document_name"] for m in indexed.store.chunks_by_ids(list(shares)).values()}
    assert names == {"bees.md"} and all(0 < v <= 1 for v in shares.values())
    rows = {r.chunk_id: r for r in cands.table()}
    assert {c for c, r in rows.items() if r.phrase > 0} == set(shares)
    without = lexical.fuse(list(zip(cands.chunk_ids, cands.cosine)),
                           list(zip(cands.chunk_ids, cands.bm25)), alpha=lexical.ALPHA,
                           coverage=dict(zip(cands.chunk_ids, cands.coverage)))
    for c, score in without:
        assert rows[c].fused == pytest.approx(score + lexical.PHRASE_WEIGHT * shares.get(c, 0.0))


class _Reverse:
    """A test reranker: the passing passages in reverse order (reads their text, as a real
    reranker would)."""

    seen: list[int] = []

    def __init__(self, embedder):
        self.embedder = embedder

    def rerank(self, query, ranked, passages, *, alpha=None):
        rows = passages([r.chunk_id for r in ranked])
        _Reverse.seen = [c for c in rows if rows[c]["content"]]
        return list(reversed(ranked))


def test_a_reranker_reaches_chat_the_inspector_and_the_metrics_alike(indexed, monkeypatch):
    """One retrieval path: the rerank step chosen by RetrievalConfig.reranker changes what
    Chat's search, the Inspector's search and the evaluation rank, all three at once."""
    from marginalia_core.lab import RetrievalLab
    from marginalia_core.retrieval import evaluation as ev
    from marginalia_core.retrieval import rerank
    from marginalia_core.store.question_sets import Judgment, Question, QuestionSet

    monkeypatch.setitem(rerank.RERANKERS, "reverse-test", _Reverse)
    ws, lab = indexed, RetrievalLab(indexed)
    question = "How do bees tell each other where flowers are?"
    lab.save_set(QuestionSet("bees", [Question(question, (Judgment("bees.md"),), "q1")]))
    before = [h.chunk_id for h in ws.search(question, threshold=-1.0)]
    assert ws.search(question)[0].document_name == "bees.md"
    assert lab.evaluate("bees", ev.EvalConfig(threshold=-1.0)).metrics["hit@1"] == 1.0

    list(ws.apply_settings({"reranker": "reverse-test", "threshold": -1.0}))
    assert ws.settings.retrieval.reranker == "reverse-test"
    chat = [h.chunk_id for h in ws.search(question)]
    assert chat == before[::-1] and sorted(_Reverse.seen) == sorted(before)
    assert [h.chunk_id for h in lab.search(question)] == chat
    # the Inspector's own Rerank control reaches its ranking table the same way
    assert [h.chunk_id for h in lab.search(question, reranker="none")] == before
    config = lab.applied()
    assert config.reranker == "reverse-test"
    assert lab.evaluate("bees", config).metrics["hit@1"] == 0.0


def test_an_unknown_reranker_is_refused_with_the_known_names(indexed):
    with pytest.raises(ValueError, match="reranker 'nope'.*none"):
        list(indexed.apply_settings({"reranker": "nope"}))
    assert indexed.applied_settings() == {}
