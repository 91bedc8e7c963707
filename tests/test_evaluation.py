"""Evaluation on a real library (real SQLite, the real local embedder, a few small documents):
metrics against hand-computed values, the BEIR figure, threshold / weight / chunk-size sweeps,
A/B comparison, the score table, the lexical relevance floor, and the ``eval`` CLI."""

from __future__ import annotations

import io
import json
import math
import threading
from pathlib import Path

import pytest

from marginalia_core import cli
from marginalia_core.config import RETRIEVAL_MODES
from marginalia_core.ingest.pipeline import ingest_bytes, reindex_document
from marginalia_core.lab import RetrievalLab
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.retriever import Hit
from marginalia_core.store.question_sets import Judgment, Question, QuestionSet

DOCS = {
    "bees.md": "Honey bees communicate the location of flowers with a waggle dance. The angle of "
    "the dance encodes the direction relative to the sun, and its length the distance.\n\n"
    "Drones do not forage; worker bees collect nectar and pollen from spring to autumn.",
    "volcano.md": "Basaltic lava flows are fluid because of their low silica content. "
    "Stratovolcanoes erupt viscous andesite explosively and build steep cones.",
    "codes.md": "Error code ZX-4471 means the cooling fan has stalled. Replace the fan "
    "assembly and reset the controller before restarting the machine.",
    "mill.md": "The windmill ground grain between two millstones. The miller dressed the stones "
    "every few weeks, cutting fresh furrows so the flour stayed fine.",
}
QUESTIONS = [
    ("How do bees tell each other where the flowers are?", "bees.md"),
    ("Why is basaltic lava runny?", "volcano.md"),
    ("What does error ZX-4471 mean?", "codes.md"),
    ("How did the miller keep the millstones sharp?", "mill.md"),
]


@pytest.fixture
def library(workspace):
    for name, text in DOCS.items():
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, text.encode()))
        assert events[-1]["type"] == "done", events[-1]
    qset = QuestionSet("docs", [Question(q, (Judgment(d),), f"q{n}")
                                for n, (q, d) in enumerate(QUESTIONS, 1)])
    RetrievalLab(workspace).save_set(qset)
    return workspace


def units(*matches):
    return [(0.5, frozenset(m)) for m in matches]


# --- metrics by hand -------------------------------------------------------------------------


def test_metrics_of_one_question_by_hand():
    q = Question("q", (Judgment("a", grade=2), Judgment("b"), Judgment("c")), "q1")
    # ranks: 1 irrelevant, 2 matches a, 3 matches a again (no new gain), 4 matches b
    r = ev.score_question(q, units((), {0}, {0}, {1}), k=3)
    assert r.first_relevant_rank == 2
    assert r.reciprocal_rank == pytest.approx(0.5)
    assert r.recall == pytest.approx(1 / 3)  # only a in the top 3
    assert r.precision == pytest.approx(2 / 3)
    assert not r.hit1
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert r.ndcg == pytest.approx(dcg / idcg)
    assert r.found == ("a",) and r.missed == ("b", "c")


def test_nothing_returned_has_no_precision_and_zero_recall():
    q = Question("q", (Judgment("a"),), "q1")
    r = ev.score_question(q, [], k=6)
    assert (r.first_relevant_rank, r.precision, r.recall, r.ndcg) == (None, None, 0.0, 0.0)
    m = ev.summarize([r], 6)
    assert m["answered"] == 0.0 and m["precision@6"] == 0.0


def test_document_level_judgments_collapse_passages_to_documents():
    """BEIR scores documents: a document's second passage must not take a rank."""
    q = Question("q", (Judgment("b"),), "q1")
    hits = [Hit(chunk_id=c, document_id=d, document_name=d, idx=0, page_start=1, page_end=1,
                score=0.5, content="", rank=c) for c, d in ((1, "a"), (2, "a"), (3, "b"))]
    assert ev.score_question(q, ev.rank_units(hits, q), 6).first_relevant_rank == 2


# --- on a real library -----------------------------------------------------------------------


def test_evaluate_each_mode_on_a_real_library(library):
    for mode in RETRIEVAL_MODES:
        res = RetrievalLab(library).evaluate("docs", ev.EvalConfig(mode=mode, threshold=0.0, top_k=3))
        assert res.metrics["questions"] == 4
        assert res.metrics["hit@1"] == 1.0, (mode, [q.first_relevant_rank for q in res.questions])
        assert res.metrics["ndcg@10"] == pytest.approx(1.0)


def test_beir_figure_equals_the_benchmark_computation(library, tmp_path):
    """``eval`` through a BEIR import gives the nDCG@10 that benchmarks/scifact_eval.py computes
    from ``Retriever.search`` (document = its best passage, pytrec_eval's definition)."""

    import scifact_eval

    names = {d.name: d.id for d in library.store.list_documents()}
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{n}", "text": q}) + "\n"
                for n, (q, _) in enumerate(QUESTIONS, 1)), encoding="utf-8")
    grades = [(1, "bees.md", 2), (1, "mill.md", 1), (2, "volcano.md", 1), (3, "codes.md", 1),
              (3, "volcano.md", 1), (4, "mill.md", 1)]
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{q}\t{names[d]}\t{g}\n" for q, d, g in grades), encoding="utf-8")
    RetrievalLab(library).import_set(tmp_path / "queries.jsonl", qrels=tmp_path / "test.tsv", name="beir")
    ours = RetrievalLab(library).evaluate("beir", ev.EvalConfig(mode="hybrid", threshold=-1.0, top_k=10))

    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in grades:
        qrels.setdefault(f"q{q}", {})[names[d]] = g
    run = {}
    for n, (text, _) in enumerate(QUESTIONS, 1):
        hits = library.retriever.search(text, k=400, threshold=-1.0, mode="hybrid")
        run[f"q{n}"] = list(dict.fromkeys(h.document_id for h in hits))
    bench = scifact_eval.evaluate(run, qrels)
    assert ours.metrics["ndcg@10"] == pytest.approx(bench["ndcg@10"], abs=1e-12)
    assert 0 < ours.metrics["ndcg@10"] < 1  # the graded judgments are not all at the top


def test_judgments_saved_from_the_inspector_survive_reindexing(library):
    ws = library
    long = " ".join(f"Sentence {i} talks about gardening and the seasons." for i in range(60))
    text = long + " The secret ingredient of the compost is crushed eggshell. " + long
    list(ingest_bytes(ws.store, ws.embedder, ws.settings, "garden.md", text.encode()))
    query = "What is the secret ingredient of the compost?"
    hit = next(h for h in ws.retriever.search(query, threshold=-1.0, k=20)
               if "eggshell" in h.content)
    RetrievalLab(ws).add_question("inspector", query, [hit.chunk_id])
    before = RetrievalLab(ws).evaluate("inspector", ev.EvalConfig(mode="hybrid", threshold=-1.0))
    assert before.questions[0].first_relevant_rank == 1
    doc = next(d for d in ws.store.list_documents() if d.name == "garden.md")
    events = list(reindex_document(ws.store, ws.embedder, ws.settings, doc.id, target=500,
                                   overlap=50))
    assert events[-1]["type"] == "done"
    assert hit.chunk_id not in ws.store.chunks_by_ids([hit.chunk_id])  # ids are gone
    after = RetrievalLab(ws).evaluate("inspector", ev.EvalConfig(mode="hybrid", threshold=-1.0))
    assert after.questions[0].first_relevant_rank == 1
    assert after.questions[0].found == before.questions[0].found


def test_threshold_sweep_in_one_pass(library):
    sweep = RetrievalLab(library).threshold_sweep("docs", mode="dense", top_k=3)
    pts = {p.threshold: p for p in sweep.points}
    assert pts[-0.1].answered == 1.0 and pts[-0.1].recall == 1.0
    assert pts[0.8].returned == 0.0 and pts[0.8].recall == 0.0
    recalls = [p.recall for p in sweep.points]
    assert recalls == sorted(recalls, reverse=True)  # a higher threshold never finds more
    best = max(p.f1 for p in sweep.points)
    assert pts[sweep.best_f1].f1 == best
    assert sweep.current == library.retriever.threshold
    # the suggestion: the highest threshold whose recall keeps the floor (95% of the current's)
    now = pts[sweep.current]
    assert sweep.floor == pytest.approx(ev.RECALL_FLOOR_SHARE * now.recall)
    assert pts[sweep.suggested].recall >= sweep.floor
    assert all(p.recall < sweep.floor or p.threshold <= sweep.suggested
               or (p.precision, p.recall, p.returned) == (now.precision, now.recall,
                                                          now.returned)
               for p in sweep.points)


def test_threshold_suggestion_keeps_recall_where_best_f1_loses_it():
    """Made-up sweeps: best F1 at a threshold that drops a relevant passage; the suggestion is
    the highest threshold that keeps recall, and a flat stretch ties to the current value."""
    opts = [(0.3, 0.3, 1.0), (0.4, 0.4, 1.0), (0.5, 0.5, 0.96), (0.6, 0.6, 0.5)]
    assert ev.suggest(opts, 0.3, ev.recall_floor(1.0)) == 0.5
    assert ev.suggest(opts, 0.3, ev.recall_floor(1.0, 1.0)) == 0.4  # a floor of the user's
    flat = [(a, 0.8, 1.0) for a in (0.0, 0.3, 0.6, 1.0)]
    assert ev.suggest(flat, 0.6, 0.95) == 0.6  # no gain: no change
    assert ev.suggest(flat, 0.5, 0.95) == 0.6  # else the nearest of the tied
    assert ev.suggest([(0.2, 0.9, 0.2)], 0.5, 0.95) == 0.5  # nothing keeps the floor


def test_weight_sweep_covers_the_grid_and_the_default(library):
    sweep = RetrievalLab(library).weight_sweep("docs", ev.EvalConfig(threshold=-1.0, top_k=3))
    alphas = [p.alpha for p in sweep.points]
    assert set(ev.WEIGHT_GRID) <= set(alphas) and sweep.current in alphas
    assert sweep.best in alphas
    floor = ev.RECALL_FLOOR_SHARE * sweep.at(sweep.current).metrics["recall@3"]
    assert sweep.floor == pytest.approx(floor)
    kept = [p for p in sweep.points if p.metrics["recall@3"] >= floor - 1e-9]
    top = max(p.metrics["ndcg@10"] for p in kept)
    assert sweep.at(sweep.best).metrics["ndcg@10"] >= top - ev.TIE
    for p in sweep.points:
        assert 0.0 <= p.metrics["ndcg@10"] <= 1.0


def test_compare_two_saved_configurations(library):
    ws = library
    RetrievalLab(ws).save_config("strict", ev.EvalConfig(mode="dense", threshold=0.9, top_k=3))
    RetrievalLab(ws).save_config("open", ev.EvalConfig(mode="hybrid", threshold=-1.0, top_k=3))
    assert set(RetrievalLab(ws).configs()) == {"strict", "open"}
    cmp = RetrievalLab(ws).compare("docs", "strict", "open")
    assert cmp.b.metrics["recall@3"] == 1.0
    assert cmp.a.metrics["recall@3"] < 1.0  # 0.9 cuts relevant passages
    assert cmp.better >= 1 and cmp.worse == 0
    gained = [d for d in cmp.deltas if d.gained]
    assert gained and all(d.rank_a is None and d.rank_b == 1 for d in gained)
    assert all(not d.lost for d in cmp.deltas)


def test_chunk_sweep_embeds_only_new_text_and_can_be_cancelled(library, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ws = library
    progress = []
    grid = [(60, 10), (1400, 200)]
    cost = RetrievalLab(ws).chunk_sweep_cost(grid)
    assert cost.to_embed > 0 and cost.passages > cost.to_embed
    first = RetrievalLab(ws).chunk_sweep("docs", grid, ev.EvalConfig(threshold=-1.0, top_k=3),
                               progress=progress.append)
    small, default = first.points
    assert small.chunks > default.chunks == len(DOCS)
    assert small.embedded_now > 0 and default.embedded_now == 0  # the library's own vectors
    assert any(e["stage"] == "embed" for e in progress)
    again = RetrievalLab(ws).chunk_sweep("docs", grid, ev.EvalConfig(threshold=-1.0, top_k=3))
    assert [p.embedded_now for p in again.points] == [0, 0]
    assert cost.to_embed == small.embedded_now  # the estimate told the truth
    assert RetrievalLab(ws).chunk_sweep_cost(grid).to_embed == 0
    assert first.current == (1400, 200) and first.best in [(60, 10), (1400, 200)]
    assert [p.result.metrics for p in again.points] == [p.result.metrics for p in first.points]
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ev.Cancelled):
        RetrievalLab(ws).chunk_sweep("docs", [(90, 10)], cancel=cancel)
    assert not list(tmp_path.glob("marginalia-sweep-*"))  # scratch indexes removed


def test_explain_reranks_by_keyword_weight_without_embedding_again(library):
    ws = library
    calls = []
    embed = ws.embedder.embed_query

    def counting(text):
        calls.append(text)
        return embed(text)

    ws.embedder.embed_query = counting
    try:
        query = "fan stalled error code"
        lab = RetrievalLab(ws)
        rows = lab.explain(query)
        keyword_only = lab.explain(query, alpha=0.0)
        dense_only = lab.explain(query, alpha=1.0)
    finally:
        del ws.embedder.embed_query
    assert calls == [query]  # the slider re-ranks cached candidates
    assert rows[0].document_name == "codes.md" and rows[0].lexical_rank == 1
    assert [r.fused_rank for r in rows] == list(range(1, len(rows) + 1))
    assert [r.chunk_id for r in dense_only] == [
        r.chunk_id for r in sorted(rows, key=lambda r: r.dense_rank)]
    matched = [r for r in keyword_only if r.bm25 > 0]
    assert keyword_only[: len(matched)] == matched  # keyword weight 1: matches first
    assert all(r.content and r.page_start == 1 for r in rows)


def test_explain_marks_as_passing_what_the_mode_keeps(library):
    """The Inspector's "passes" column is the threshold step of the mode shown: in keywords-only
    mode a passage above the keyword floor passes whatever its cosine, in meaning-only mode a
    keyword match alone does not, and every passage a search returns is marked as passing."""
    lab = RetrievalLab(library)
    query = "waggle dance angle"
    for threshold in (0.25, 0.6):
        by_mode = {m: lab.explain(query, threshold=threshold, mode=m)
                   for m in ("hybrid", "dense", "lexical")}
        for mode, rows in by_mode.items():
            kept = {r.chunk_id for r in library.retriever.passing(
                rows, library.retriever.config(threshold=threshold, mode=mode))}
            assert {r.chunk_id for r in rows if r.passes} == kept, mode
            returned = lab.search(query, k=10, threshold=threshold, mode=mode)
            assert returned or threshold > 0.5, mode
            assert all(next(r for r in rows if r.chunk_id == h.chunk_id).passes
                       for h in returned), mode
    # at 0.6 the bee passage's cosine is below the threshold: only the keyword floor keeps it
    bees = {m: next(r for r in rows if r.document_name == "bees.md")
            for m, rows in by_mode.items()}
    assert bees["dense"].cosine < 0.6 and not bees["dense"].passes
    assert bees["lexical"].passes and bees["hybrid"].passes


def test_lexical_mode_has_a_relevance_floor(library):
    ret = library.retriever
    # shares the word "angle" with bees.md and nothing else with any document
    assert ret.search("the angle of my quarterly tax return", mode="lexical") == []
    assert lexical.bm25_search(ret.store.conn, "the angle of my quarterly tax return")
    hits = ret.search("waggle dance angle", mode="lexical")
    assert [h.document_name for h in hits] == ["bees.md"]


# --- CLI -------------------------------------------------------------------------------------


def run_cli(db, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*argv, "--db", str(db), "--embedder", "local", "--answerer", "extractive"],
                    out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_qsets_and_eval(library, tmp_path):
    db = library.settings.db_path
    library.close()
    csv_path = tmp_path / "set.csv"
    csv_path.write_text("question,document,page\n" + "".join(
        f"{q},{d},1\n" for q, d in QUESTIONS), encoding="utf-8")
    code, out, err = run_cli(db, "qsets", "import", str(csv_path), "--name", "csv")
    assert code == 0, err
    code, out, _ = run_cli(db, "qsets", "list")
    assert {json.loads(line)["name"] for line in out.splitlines()} == {"docs", "csv"}
    code, out, err = run_cli(db, "eval", "csv", "--mode", "hybrid", "--threshold", "0")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [ln["type"] for ln in lines] == ["question"] * 4 + ["metrics"]
    assert lines[-1]["metrics"]["hit@1"] == 1.0 and lines[0]["firstRelevantRank"] == 1
    code, out, _ = run_cli(db, "eval", "csv", "--format", "table", "--sweep", "threshold")
    assert code == 0 and "suggested" in out and "precision" in out.splitlines()[0]
    code, out, _ = run_cli(db, "qsets", "export", "csv", "--format", "csv")
    assert out.splitlines()[1] == f"{QUESTIONS[0][0]},bees.md,1"
    code, _, err = run_cli(db, "eval", "nope")
    assert code == 1 and "No question set named 'nope'" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("question,document,page\nq?,a.md,x\n", encoding="utf-8")
    code, _, err = run_cli(db, "qsets", "import", str(bad), "--name", "bad")
    assert code == 1 and "line 2" in err


ANSWERS_CSV = (
    "question,document,page,answer\n"
    "How do bees tell each other where the flowers are?,bees.md,,waggle dance\n"
    "What does error ZX-4471 mean?,codes.md,,the cooling fan has stalled\n"
    "Why is basaltic lava runny?,volcano.md,,because it is hot\n"
    "Who won the 1998 chess olympiad?,,,\n"
)


def test_answer_metrics_by_hand():
    from marginalia_core.chat import answer_metrics as am

    assert am.contains("the Waggle-Dance", "Bees do a waggle dance [1].")
    assert not am.contains("dance", "Bees do a waggle dancer.")  # whole words only
    assert am.first_sentence("Bees dance. [1] Then they rest.") == "Bees dance. [1]"
    checks = [
        am.AnswerCheck("q1", "", "x", True, "", 1, False, True, False, None, None),
        am.AnswerCheck("q2", "", "y", True, "", 1, False, False, False, None, None),
        am.AnswerCheck("q3", "", "", False, "", 0, True, None, None, None, None),
    ]
    assert am.summarize(checks) == {
        "answer containment": 0.5, "first-sentence containment": 0.0,
        "refusals (unanswerable)": 1.0, "citation precision": None, "citation recall": None}


def test_answer_metrics_and_the_cli_print_the_same(library, tmp_path):
    from marginalia_core.chat.answer_metrics import ANSWER_METRICS

    ws = library
    path = tmp_path / "answers.csv"
    path.write_text(ANSWERS_CSV, encoding="utf-8")
    RetrievalLab(ws).import_set(path, name="answers")
    cfg = ev.EvalConfig(mode="hybrid", threshold=0.2, top_k=3)
    result = RetrievalLab(ws).evaluate_answers("answers", cfg)
    by_id = {a.question_id: a for a in result.answers}
    assert len(by_id) == 4
    unanswerable = next(a for a in result.answers if not a.answerable)
    assert unanswerable.contains is None
    assert result.metrics["refusals (unanswerable)"] == float(unanswerable.refused)
    bees = next(a for a in result.answers if a.expected == "waggle dance")
    assert bees.contains and not bees.refused and bees.sources >= 1
    lava = next(a for a in result.answers if a.expected == "because it is hot")
    assert lava.contains is False  # the library says otherwise: not contained
    assert 0 < result.metrics["answer containment"] < 1
    assert result.retrieval.metrics["questions"] == 4
    assert result.retrieval.metrics["recall@3"] == RetrievalLab(ws).evaluate("answers", cfg).metrics[
        "recall@3"]  # the unanswerable question is left out of retrieval metrics
    db = ws.settings.db_path
    ws.close()
    code, out, err = run_cli(db, "eval", "answers", "--answers", "--mode", "hybrid",
                             "--threshold", "0.2", "--k", "3")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [ln["type"] for ln in lines] == ["answer"] * 4 + ["answer_metrics"]
    printed = lines[-1]["metrics"]
    assert [printed[k] for k in ANSWER_METRICS] == [result.metrics[k] for k in ANSWER_METRICS]
    assert printed["recall@3"] == result.retrieval.metrics["recall@3"]
    code, out, err = run_cli(db, "eval", "answers", "--answers", "--format", "table",
                             "--mode", "hybrid", "--threshold", "0.2", "--k", "3")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("answer containment"))
    assert row.split()[-1] == f"{result.metrics['answer containment']:.4f}"


@pytest.mark.slow
def test_scifact_slice_eval_matches_the_benchmark(workspace, tmp_path):
    """A real SciFact slice (10 test queries, their abstracts and 30 others) through the BEIR
    import gives scifact_eval.py's nDCG@10 for the app's own query path."""
    import random
    from pathlib import Path

    from conftest import SHARED_EVAL, requires_eval

    data = SHARED_EVAL / "scifact"
    if not data.exists() and Path("/work/shared/eval/scifact").exists():
        data = Path("/work/shared/eval/scifact")
    requires_eval(data)
    import scifact_eval

    scifact_eval.DATA = data
    qrels = {q: r for q, r in sorted(scifact_eval.load_qrels("test").items())[:10]}
    judged = {d for r in qrels.values() for d in r}
    corpus = dict(scifact_eval.load_corpus())
    others = random.Random(5).sample(sorted(set(corpus) - judged), 30)
    for doc_id in sorted(judged) + others:
        list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                          f"{doc_id}.txt", corpus[doc_id].encode()))
    # the library's documents are named <corpus id>.txt: judgments name the corpus id, so
    # rename them to the corpus id as the benchmark's database does
    workspace.store.conn.execute("UPDATE documents SET name = substr(name, 1, length(name) - 4)")
    tsv = tmp_path / "test.tsv"
    tsv.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, r in qrels.items() for d, g in r.items()), encoding="utf-8")
    RetrievalLab(workspace).import_set(data / "queries.jsonl", qrels=tsv, name="slice")
    ours = RetrievalLab(workspace).evaluate("slice", ev.EvalConfig(mode="hybrid", threshold=-1.0))

    queries = scifact_eval.load_queries()
    run = {}
    for q in qrels:
        hits = workspace.retriever.search(queries[q], k=scifact_eval.PROJECT_K, threshold=-1.0,
                                          mode="hybrid")
        run[q] = list(dict.fromkeys(h.document_name for h in hits))
    assert ours.metrics["ndcg@10"] == pytest.approx(scifact_eval.evaluate(run, qrels)["ndcg@10"],
                                                    abs=1e-12)


def test_a_text_files_ticked_passage_names_no_page_in_tables_or_exports(workspace):
    """A Markdown file is stored as one page 1: judged by its pages it is the whole document,
    its span keeps no page, and neither the per-question table nor a CSV export says "p. 1";
    a PDF's passage keeps its page (both backends: the mime comes from the store)."""
    from pdf_maker import text_pdf

    pdf = text_pdf(["The mill pond froze every winter.",
                    "In 1912 a flood destroyed the mill wheel, which was never rebuilt."])
    for name, data in (("notes.md", b"# Notes\n\nThe compost needs crushed eggshell.\n"),
                       ("mill.pdf", pdf)):
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, data))
        assert events[-1]["type"] == "done", events[-1]
    hits = workspace.retriever.search("eggshell compost flood mill wheel", threshold=-1.0, k=10)
    md = next(h for h in hits if h.document_name == "notes.md")
    wheel = next(h for h in hits if "wheel" in h.content)
    assert md.mime == "text/markdown" and wheel.mime == "application/pdf"
    rows = workspace.store.chunks_by_ids([md.chunk_id, wheel.chunk_id])
    assert ev.judgments_for_chunk(rows[md.chunk_id], by="page") == Judgment("notes.md")
    span = ev.judgments_for_chunk(rows[md.chunk_id])
    assert span.level == "span" and span.page_start is None and "p." not in span.label
    pdf_judgment = ev.judgments_for_chunk(rows[wheel.chunk_id], by="page")
    assert pdf_judgment.label.startswith("mill.pdf p. ") and pdf_judgment.page_start >= 1
    pages = (str(wheel.page_start) if wheel.page_start == wheel.page_end
             else f"{wheel.page_start}-{wheel.page_end}")

    RetrievalLab(workspace).add_question("pages", "What do the notes say?", [md.chunk_id], by="page")
    RetrievalLab(workspace).add_question("pages", "What destroyed the wheel?", [wheel.chunk_id], by="page")
    result = RetrievalLab(workspace).evaluate("pages", ev.EvalConfig(mode="hybrid", threshold=-1.0))
    labels = [x for q in result.questions for x in (*q.found, *q.missed)]
    assert sorted(labels) == [pdf_judgment.label, "notes.md"]
    csv_rows = RetrievalLab(workspace).export_set("pages", "csv").splitlines()
    assert "What do the notes say?,notes.md," in csv_rows
    assert f"What destroyed the wheel?,mill.pdf,{pages}" in csv_rows


@pytest.mark.both_backends
def test_a_ticked_slide_or_sheet_row_is_judged_by_its_location_not_a_page(workspace):
    """Question sets judge a slide as "slide 1" and sheet rows as "sheet Sheet1, row 3", in the
    lab's tables and exports, and an export imported again keeps them."""
    data = Path(__file__).parent / "data" / "formats"
    for name in ("txt-fit-text.pptx", "inventory-table.xlsx"):
        end = list(workspace.ingest(name, (data / name).read_bytes()))[-1]
        assert end["type"] == "done", end
    lab = RetrievalLab(workspace)
    asked = {}
    for question, name, place in (
        ("What is the craft of designing typefaces called?", "txt-fit-text.pptx", "slide 1"),
        ("How many bananas are in stock?", "inventory-table.xlsx", "sheet Sheet1, row"),
    ):
        hit = next(h for h in workspace.retriever.search(question, threshold=-1.0, k=10)
                   if h.document_name == name)
        assert place in hit.location, hit.location
        for by in ("page", "span"):
            lab.add_question(f"by {by}", question, [hit.chunk_id], by=by)
        asked[question] = hit.location
    for by in ("page", "span"):
        result = lab.evaluate(f"by {by}", ev.EvalConfig(mode="hybrid", threshold=-1.0))
        for q in result.questions:
            assert not q.missed, q  # the unit still matches its passage
            [label] = q.found
            assert asked[q.question] in label and " p. " not in label, label
        exported = lab.export_set(f"by {by}")
        assert all(f'"location": "{where}"' in exported for where in asked.values())
        lab.import_upload({"again.jsonl": exported.encode()}, name=f"again {by}")
        again = lab.evaluate(f"again {by}", ev.EvalConfig(mode="hybrid", threshold=-1.0))
        assert [q.found for q in again.questions] == [q.found for q in result.questions]


def test_why_missed_names_the_setting_and_its_fix_finds_the_passage(library):
    ws = library
    strict = ev.EvalConfig(mode="dense", threshold=0.9, top_k=3)
    result = RetrievalLab(ws).evaluate("docs", strict)
    missed = next(q for q in result.questions if q.missed)
    report = RetrievalLab(ws).why_missed("docs", missed.question_id, 0, strict)
    assert report.reason == "threshold"
    assert report.cosine is not None and report.cosine < 0.9
    assert report.dense_rank is not None and report.rank is None
    assert report.content and report.document == missed.missed[0]
    assert report.fix is not None and report.fix.threshold <= report.cosine
    assert report.fix_label == f"threshold {report.fix.threshold:.2f}"
    fixed = RetrievalLab(ws).evaluate("docs", report.fix)
    again = next(q for q in fixed.questions if q.question_id == missed.question_id)
    assert not again.missed  # the suggested setting includes it
    cmp = RetrievalLab(ws).compare("docs", strict, report.fix)  # and what else changes
    assert cmp.better >= 1 and cmp.worse == 0
    assert RetrievalLab(ws).why_missed("docs", missed.question_id, 0, report.fix).reason == "found"


def test_why_missed_a_document_the_library_lacks(library):
    ws = library
    RetrievalLab(ws).save_set(QuestionSet("gone", [Question("Where is it?", (Judgment("nowhere.md"),),
                                                  "q1")]))
    report = RetrievalLab(ws).why_missed("gone", "q1", 0, ev.EvalConfig())
    assert report.reason == "document_scope" and "nowhere.md" in report.explanation
    assert report.fix is None
