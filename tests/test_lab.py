"""The lab's "Apply to Chat": a configuration saved per library (migration m010) becomes the
settings Chat retrieves with, re-indexing the documents chunked otherwise; the environment stays
the default underneath. Also the Inspector's upload import. Real SQLite, real local embedder."""

from __future__ import annotations

import pytest

from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.lab import RetrievalLab
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.store import migrations
from marginalia_core.store.question_sets import QuestionSetError
from marginalia_core.workspace import Workspace

DOCS = {
    "bees.md": "Honey bees communicate the location of flowers with a waggle dance. The angle of "
    "the dance encodes the direction relative to the sun, and its length the distance. " * 6,
    "mill.md": "The windmill ground grain between two millstones. The miller dressed the stones "
    "every few weeks, cutting fresh furrows so the flour stayed fine. " * 6,
}


@pytest.fixture
def library(workspace):
    for name, text in DOCS.items():
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, text.encode()))
        assert events[-1]["type"] == "done", events[-1]
    return workspace


def reopen(ws: Workspace, local_embedder) -> Workspace:
    """A new process on the same database: a fresh Workspace with the same defaults."""
    fresh = Workspace(ws.defaults)
    fresh.__dict__["embedder"] = local_embedder
    return fresh


def test_m010_creates_the_library_settings_table(store):
    assert "m010_library_settings" in migrations.applied(store.conn)
    cols = [r[1] for r in store.conn.execute("PRAGMA table_info(library_settings)")]
    assert cols == ["key", "value", "updated"]


def test_apply_to_chat_changes_what_chat_retrieves_and_survives_a_restart(library,
                                                                         local_embedder):
    ws = library
    question = "How do bees find flowers?"
    assert ws.settings.retrieval.top_k == 6 and ws.settings.retrieval.mode == "hybrid"
    config = ev.EvalConfig(mode="dense", threshold=0.99, top_k=2, alpha=0.3)
    events = list(RetrievalLab(ws).apply(config))
    assert events == []  # same chunking: nothing to re-index
    assert (ws.settings.retrieval.mode, ws.settings.retrieval.threshold, ws.settings.retrieval.top_k,
            ws.settings.retrieval.alpha) == ("dense", 0.99, 2, 0.3)
    assert ws.retriever.settings is ws.settings
    # a threshold no passage reaches: Chat now says it found nothing, without a model call
    chat = list(ws.ask(question))
    assert chat[0]["type"] == "meta" and chat[0]["sources"] == []
    assert "Retrieval Inspector" in "".join(e.get("text", "") for e in chat
                                            if e["type"] == "token")

    fresh = reopen(ws, local_embedder)
    try:
        assert fresh.settings.retrieval.threshold == 0.99 and fresh.settings.retrieval.top_k == 2
        assert RetrievalLab(fresh).applied() == ev.EvalConfig(
            mode="dense", threshold=0.99, top_k=2, alpha=0.3,
            chunk_target=ws.defaults.retrieval.chunk_target, chunk_overlap=ws.defaults.retrieval.chunk_overlap,
            embedder=local_embedder.key,
        )
        assert fresh.defaults.retrieval.threshold is None  # the environment is untouched
        list(RetrievalLab(fresh).apply(ev.EvalConfig(mode="hybrid", threshold=0.0, top_k=1)))
        meta = next(iter(fresh.ask(question)))
        assert len(meta["sources"]) == 1
        assert meta["sources"][0]["document_name"] == "bees.md"
    finally:
        fresh.close()


def test_apply_with_another_chunking_reindexes_every_document(library, local_embedder):
    ws = library
    before = {d.name: d.chunk_count for d in ws.documents()}
    events = list(RetrievalLab(ws).apply(ev.EvalConfig(mode="hybrid", top_k=4, chunk_target=200,
                                             chunk_overlap=20)))
    assert [e["type"] for e in events].count("done") == len(DOCS)
    docs = ws.documents()
    assert {(d.chunk_target, d.chunk_overlap) for d in docs} == {(200, 20)}
    assert all(d.chunk_count > before[d.name] for d in docs)
    # new uploads are chunked the applied way too
    events = list(ws.ingest("extra.md", ("Quinces turn pink when cooked slowly. " * 20).encode()))
    assert events[-1]["type"] == "done"
    extra = next(d for d in ws.documents() if d.name == "extra.md")
    assert (extra.chunk_target, extra.chunk_overlap) == (200, 20)
    # applying the same again re-indexes nothing
    assert list(RetrievalLab(ws).apply(RetrievalLab(ws).applied())) == []


def test_restoring_the_defaults(library):
    ws = library
    list(RetrievalLab(ws).apply(ev.EvalConfig(mode="lexical", top_k=3)))
    assert ws.settings.retrieval.mode == "lexical"
    assert list(ws.apply_settings({})) == []
    assert ws.settings == ws.defaults
    assert ws.applied_settings() == {}


def test_a_bad_setting_is_refused_and_nothing_is_saved(library):
    ws = library
    with pytest.raises(ValueError, match="retrieval mode"):
        ws.apply_settings({"retrieval_mode": "telepathy"})
    with pytest.raises(ValueError, match="not a retrieval setting"):
        ws.apply_settings({"db_path": "/tmp/elsewhere.db"})
    assert ws.applied_settings() == {}


def test_import_an_uploaded_csv_and_a_beir_pair(library):
    lab = RetrievalLab(library)
    csv = b"question,document,page\nHow do bees find flowers?,bees.md,1\nWho dressed the stones?,mill.md,\n"
    summary = lab.import_upload({"mine.csv": csv}, name="uploaded")
    assert (summary.name, summary.questions) == ("uploaded", 2)
    beir = {
        "queries.jsonl": b'{"_id": "1", "text": "waggle dance"}\n',
        "test.tsv": b"query-id\tcorpus-id\tscore\n1\tbees.md\t1\n",
    }
    assert lab.import_upload(beir, name="beir").questions == 1
    result = lab.evaluate("beir", ev.EvalConfig(mode="lexical", top_k=3))
    assert result.questions[0].first_relevant_rank == 1
    with pytest.raises(QuestionSetError, match="queries.jsonl"):
        lab.import_upload({"test.tsv": beir["test.tsv"]}, name="half")
    with pytest.raises(QuestionSetError, match="line 2"):
        lab.import_upload({"bad.csv": b"question,document\nonly a question\n"}, name="bad")
    assert {s.name for s in lab.list_sets()} == {"uploaded", "beir"}


def test_the_fusion_weight_setting_orders_hybrid_results(library, local_embedder):
    from marginalia_core.config import load_settings

    env = {"MARGINALIA_DB": library.defaults.db_path, "MARGINALIA_EMBEDDER": "local",
           "MARGINALIA_FUSION_ALPHA": "0.1"}
    ws = Workspace(load_settings(env=env))
    ws.__dict__["embedder"] = local_embedder
    try:
        assert ws.settings.retrieval.alpha == 0.1
        cands = ws.retriever.candidates("millstones flour")
        expected = [r.chunk_id for r in cands.table(0.1)]
        got = [h.chunk_id for h in ws.retriever.retrieve(
            cands, ws.retriever.config(mode="hybrid", threshold=-1.0), top_k=False)]
        assert got == expected
        assert [r.fused for r in cands.table(0.1)] != [r.fused for r in cands.table(None)]
    finally:
        ws.close()


def test_settings_applied_elsewhere_reach_a_running_workspace(library, local_embedder):
    """Two Workspaces on one library (two app processes, or two chat-model choices): what one
    applies, the other's Chat retrieves with on its next question."""
    other = reopen(library, local_embedder)
    try:
        assert other.retriever.settings.retrieval.top_k == 6
        list(RetrievalLab(library).apply(ev.EvalConfig(mode="dense", threshold=0.0, top_k=1)))
        meta = next(iter(other.ask("How do bees find flowers?")))
        assert len(meta["sources"]) == 1
        assert other.retriever.settings is other.settings
        assert other.settings.retrieval.top_k == 1 and other.settings.retrieval.mode == "dense"
    finally:
        other.close()
