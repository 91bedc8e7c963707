"""The Inspector's retrieval lab through AppTest (the real app, core and a temporary database):
make a question set by ticking passages, evaluate it, sweep the threshold, save and compare two
configurations, apply one to Chat, and keep the controls across page switches."""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd
import pytest
import streamlit as st
from conftest import ROOT, SAMPLES
from streamlit.testing.v1 import AppTest

from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.lab import RetrievalLab
from marginalia_core.retrieval import evaluation as ev

APP = str(ROOT / "app.py")
INSPECTOR = "pages/inspector.py"
CHAT = "pages/chat.py"
QUESTIONS = [
    ("What did Fermat write in the margin?", "a-short-history-of-marginalia.md"),
    ("How should old books be stored?", "caring-for-old-books.pdf"),
    ("How are answers cited?", "how-marginalia-works.md"),
]


@pytest.fixture
def app_env(db_path, monkeypatch, workspace):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    for p in sorted(SAMPLES.iterdir()):
        if p.suffix in (".md", ".pdf"):
            end = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                    p.name, p.read_bytes()))[-1]
            assert end["type"] == "done", end
    st.cache_resource.clear()
    st.cache_data.clear()
    yield workspace
    st.cache_resource.clear()
    st.cache_data.clear()


def start() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90).run()
    at.switch_page(INSPECTOR).run()
    assert not at.exception
    return at


def section(at: AppTest, name: str) -> None:
    at.button_group(key="inspector_section").set_value(name).run()
    assert not at.exception


def ask(at: AppTest, question: str) -> None:
    at.text_input(key="inspector_query").input(question).run()
    assert not at.exception


def tick(at: AppTest, document: str) -> None:
    """Tick the first listed passage of ``document``."""
    box = next(c for c in at.checkbox if c.key.startswith("tick-")
               and c.label.replace("\\", "").startswith(document))
    box.check().run()
    assert not at.exception


class _Tables(HTMLParser):
    """The lab's HTML tables as lists of {header: cell text}; a cell with expandable passages
    reads as the passages' labels (their summaries) joined by "; "."""

    def __init__(self):
        super().__init__()
        self.tables, self.head, self.row, self.cell, self.summaries = [], [], None, None, None
        self.in_summary = self.in_details = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
            self.head = []
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell, self.summaries = [], []
        elif tag == "details":
            self.in_details = True
        elif tag == "summary":
            self.in_summary = True
            self.summaries.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            text = "; ".join(self.summaries) if self.summaries else "".join(self.cell).strip()
            self.row.append(text)
        elif tag == "tr" and self.row is not None:
            if not self.head:
                self.head = self.row
            else:
                self.tables[-1].append(dict(zip(self.head, self.row, strict=True)))
            self.row = None
        elif tag == "summary":
            self.in_summary = False
        elif tag == "details":
            self.in_details = False

    def handle_data(self, data):
        if self.in_summary:
            self.summaries[-1] += data
        elif self.cell is not None and not self.in_details:
            self.cell.append(data)


def html_tables_with(at: AppTest, header: str) -> list[list[dict[str, str]]]:
    found = []
    for element in at.get("html"):
        parser = _Tables()
        parser.feed(element.proto.body)
        found += [t for t in parser.tables if t and header in t[0]]
    return found


def html_table(at: AppTest, header: str) -> list[dict[str, str]]:
    """The first lab table (``st.html``) with a column named ``header``."""
    for element in at.get("html"):
        parser = _Tables()
        parser.feed(element.proto.body)
        for table in parser.tables:
            if table and header in table[0]:
                return table
    raise AssertionError(f"no table with a {header!r} column")


def number(text: str) -> int | None:
    return None if text == "–" else int(text)


def ranks(column) -> list[int | None]:
    return [None if pd.isna(x) else int(x) for x in column]


def make_set(at: AppTest, name: str = "mine") -> None:
    section(at, "Question sets")
    for question, document in QUESTIONS:
        ask(at, question)
        tick(at, document)
        at.text_input(key="inspector_new_set").input(name).run()
        at.button(key="inspector_save_q").click().run()
        assert not at.exception
        assert at.success and "Saved" in at.success[0].value
        assert not any(c.value for c in at.checkbox if c.key.startswith("tick-"))  # unticked


def test_make_evaluate_sweep_save_and_compare(app_env):
    ws = app_env
    at = start()
    make_set(at)
    qset = RetrievalLab(ws).get_set("mine")
    assert [q.text for q in qset.questions] == [q for q, _ in QUESTIONS]
    assert [q.judgments[0].document for q in qset.questions] == [d for _, d in QUESTIONS]
    assert all(j.span_start is not None for q in qset.questions for j in q.judgments)

    section(at, "Evaluate and tune")
    assert at.selectbox(key="inspector_set").value == "mine"
    at.button(key="inspector_evaluate").click().run()
    assert not at.exception
    expected = RetrievalLab(ws).evaluate("mine", ev.EvalConfig(
        mode="hybrid", threshold=ws.retriever.threshold, top_k=6, alpha=0.55))
    shown = {m.label: m.value for m in at.metric}
    assert shown["Ranking (nDCG@10)"] == f"{expected.metrics['ndcg@10']:.3f}"
    assert shown["Found"] == f"{expected.metrics['recall@6']:.3f}"
    per_q = html_table(at, "first relevant at")
    assert [number(r["first relevant at"]) for r in per_q] == [
        q.first_relevant_rank for q in expected.questions]
    assert all(r["first relevant at"] != "–" for r in per_q)  # every ticked one found again
    assert [r["found"] for r in per_q] == ["; ".join(q.found) for q in expected.questions]
    assert [r["missed"] for r in per_q] == ["; ".join(q.missed) for q in expected.questions]
    # a passage is named by document and first words, never by character offsets or "None"
    cells = " ".join(v for r in per_q for v in r.values())
    assert "chars" not in cells and "None" not in cells and "“" in cells

    at.button(key="inspector_sweep_t").click().run()
    assert not at.exception
    sweep = RetrievalLab(ws).threshold_sweep("mine", mode="hybrid", top_k=6, alpha=0.55)
    assert any(f"suggested {sweep.suggested:.2f}" in m.value for m in at.markdown)
    assert len(at.get("vega_lite_chart")) >= 1
    at.button(key="inspector_use_suggested").click().run()
    assert at.slider(key="inspector_threshold").value == pytest.approx(
        max(0.0, sweep.suggested))

    at.text_input(key="inspector_cfg_name").input("suggested").run()
    at.button(key="inspector_save_cfg").click().run()
    at.button_group(key="inspector_mode").set_value("dense").run()
    at.slider(key="inspector_threshold").set_value(0.6).run()
    at.button(key="inspector_evaluate").click().run()
    at.text_input(key="inspector_cfg_name").input("strict dense").run()
    at.button(key="inspector_save_cfg").click().run()
    assert not at.exception
    saved = RetrievalLab(ws).configs()
    assert set(saved) == {"suggested", "strict dense"}
    assert (saved["strict dense"].mode, saved["strict dense"].threshold) == ("dense", 0.6)

    section(at, "Compare")
    at.selectbox(key="inspector_cfg_a").set_value("strict dense").run()
    at.selectbox(key="inspector_cfg_b").set_value("suggested").run()
    at.button(key="inspector_compare").click().run()
    assert not at.exception
    cmp = RetrievalLab(ws).compare("mine", "strict dense", "suggested")
    deltas = html_table(at, "rank in A")
    assert [number(r["rank in A"]) for r in deltas] == [d.rank_a for d in cmp.deltas]
    assert [number(r["rank in B"]) for r in deltas] == [d.rank_b for d in cmp.deltas]
    assert [r["gained in B"] for r in deltas] == ["; ".join(d.gained) for d in cmp.deltas]
    assert cmp.better >= 1  # the strict threshold loses passages the suggested one finds
    noun = "question" if cmp.better == 1 else "questions"
    assert any(f"{cmp.better} {noun} better, {cmp.worse} worse" in m.value
               for m in at.markdown)

    # configurations you can move: apply B from Compare, load one, reset to the defaults
    assert not ws.retrieval_tuning().tuned
    at.button(key="inspector_apply_b").click().run()
    assert not at.exception
    assert any("Chat now uses “suggested” (B)" in m.value.replace("\\", "")
               for m in at.success)
    tuning = ws.retrieval_tuning()
    assert tuning.config == "suggested"
    assert tuning.tuned == (sweep.suggested != RetrievalLab(ws).defaults().threshold)
    assert RetrievalLab(ws).same_effect(RetrievalLab(ws).applied(), saved["suggested"])
    at.selectbox(key="inspector_load_name").set_value("strict dense").run()
    at.button(key="inspector_load").click().run()
    assert not at.exception
    assert at.button_group(key="inspector_mode").value == "dense"
    assert at.slider(key="inspector_threshold").value == pytest.approx(0.6)
    assert not at.button(key="inspector_apply").disabled  # loaded, not applied
    at.button(key="inspector_reset").click().run()
    defaults = RetrievalLab(ws).defaults()
    assert at.button_group(key="inspector_mode").value == defaults.mode
    assert at.slider(key="inspector_threshold").value == pytest.approx(defaults.threshold)
    assert at.number_input(key="inspector_k").value == defaults.top_k
    assert at.button(key="inspector_reset").disabled


def test_apply_to_chat_and_controls_survive_navigation(app_env):
    ws = app_env
    at = start()
    ask(at, "What did Fermat write in the margin?")
    at.button_group(key="inspector_mode").set_value("lexical").run()
    at.number_input(key="inspector_k").set_value(2).run()
    assert not at.button(key="inspector_apply").disabled
    at.button(key="inspector_apply").click().run()
    assert not at.exception
    assert at.success and "Chat now uses these settings" in at.success[0].value
    assert at.button(key="inspector_apply").disabled  # applied: nothing to apply
    assert ws.applied_settings()["mode"] == "lexical"
    assert ws.applied_settings()["top_k"] == 2

    at.switch_page(CHAT).run()
    assert not at.exception
    at.chat_input[0].set_value("What did Fermat write in the margin?").run()
    assert not at.exception
    # Chat retrieved with the applied settings: at most 2 passages
    cid = at.session_state["cid"]
    assert cid
    (answer,) = [m for m in ws.messages(cid) if m.role == "assistant"]
    assert 1 <= len(answer.sources) <= 2

    at.switch_page(INSPECTOR).run()
    assert not at.exception
    assert at.text_input(key="inspector_query").value == "What did Fermat write in the margin?"
    assert at.button_group(key="inspector_mode").value == "lexical"
    assert at.number_input(key="inspector_k").value == 2


def test_the_reranker_is_offered_applied_to_chat_and_named(app_env):
    ws = app_env
    at = start()
    ask(at, "What did Fermat write in the margin?")
    rerank = at.selectbox(key="inspector_rerank")
    assert rerank.value == "none" and rerank.options == ["None", "Sentence windows"]
    rerank.set_value("sentences").run()
    assert not at.exception
    at.button(key="inspector_apply").click().run()
    assert not at.exception
    assert ws.applied_settings()["reranker"] == "sentences"
    at.selectbox(key="inspector_rerank").set_value("none").run()  # what Chat uses is named
    assert any("Chat uses:" in c.value and "rerank: sentence windows" in c.value
               for c in at.caption), [c.value for c in at.caption]
    at.selectbox(key="inspector_rerank").set_value("sentences").run()
    at.switch_page(CHAT).run()
    at.switch_page(INSPECTOR).run()
    assert at.selectbox(key="inspector_rerank").value == "sentences"  # kept across pages
    at.button(key="inspector_reset").click().run()  # the defaults again: no reranker
    assert at.selectbox(key="inspector_rerank").value == "none"


def test_no_match_reply_links_to_the_settings(app_env):
    ws = app_env
    list(ws.apply_settings({"retrieval_mode": "dense", "threshold": 0.99}))
    at = AppTest.from_file(APP, default_timeout=90).run()
    at.chat_input[0].set_value("What did Fermat write in the margin?").run()
    assert not at.exception
    links = [e for e in at.get("page_link") if "retrieval settings" in e.proto.label]
    assert links and links[0].proto.page == "inspector"


def test_keyword_weight_and_passage_size_sweeps(app_env):
    ws = app_env
    at = start()
    make_set(at, "sizes")
    section(at, "Evaluate and tune")
    charts_before = len(at.get("vega_lite_chart"))
    at.button(key="inspector_sweep_w").click().run()
    assert not at.exception
    sweep = RetrievalLab(ws).weight_sweep("sizes", RetrievalLab(ws).default_config())
    kw = {p.alpha: round(1 - p.alpha, 2) for p in sweep.points}
    assert (f"**Keyword weight sweep** · now {kw[sweep.current]:.2f} · suggested "
            f"{kw[sweep.best]:.2f}") in [m.value for m in at.markdown]
    assert len(at.get("vega_lite_chart")) == charts_before + 1
    use = at.button(key="inspector_use_weight")
    assert use.disabled == (sweep.best == sweep.current)

    at.button(key="inspector_sweep_c").click().run()
    assert not at.exception
    cost = RetrievalLab(ws).chunk_sweep_cost(config=RetrievalLab(ws).default_config())
    assert any(f"{cost.passages:,} passages in 3 sizes" in m.value for m in at.markdown)
    assert not html_tables_with(at, "passage size / overlap")  # nothing ran yet
    at.button(key="inspector_sweep_c_start").click().run()
    assert not at.exception
    table = html_table(at, "passage size / overlap")
    assert [r["passage size / overlap"] for r in table] == ["800 / 100", "1400 / 200",
                                                            "2000 / 300"]
    assert table[1]["embedded now"] == "0"  # the library's own passages: no embedding
    assert table[1][""].startswith("now")
    counts = [int(r["passages"]) for r in table]
    assert counts == sorted(counts, reverse=True)  # bigger passages, fewer of them
    assert not list(ws.store.conn.execute(
        "SELECT 1 FROM documents WHERE chunk_target != 1400"))  # the library is untouched
    assert RetrievalLab(ws).chunk_sweep_cost(config=RetrievalLab(ws).default_config()).to_embed == 0


def _sweep(current: float, suggested: float) -> ev.ThresholdSweep:
    points = [ev.ThresholdPoint(t, 0.2 + t, 1.0 - t / 2, 0.5, 3.0, 1.0) for t in (0.0, 0.25, 0.5)]
    return ev.ThresholdSweep("hybrid", 6, current, suggested, points)


@pytest.mark.parametrize(("current", "suggested"), [(0.25, 0.4), (0.4, 0.25), (0.3, 0.3)])
def test_sweep_chart_labels_sit_above_the_curves_on_opposite_sides(current, suggested):
    """The "now" and "suggested" labels are drawn in the band above 1.0 that no curve reaches
    (recall is often 1.0 at low thresholds), and on opposite sides of their rules, so they do not
    write over a line or over each other even when the two thresholds are equal."""
    from marginalia_app.charts import SWEEP_HEADROOM, sweep_chart

    spec = sweep_chart(_sweep(current, suggested), current).to_dict()
    lines = spec["layer"][0]
    assert lines["encoding"]["y"]["scale"]["domain"] == [0, SWEEP_HEADROOM]
    assert max(lines["encoding"]["y"]["axis"]["values"]) == 1.0
    datasets = spec["datasets"]
    labels = {}
    for layer in spec["layer"][1:]:
        row = datasets[layer["data"]["name"]][0]
        for sub in layer["layer"]:
            mark = sub["mark"]
            if mark["type"] != "text":
                continue
            assert sub["encoding"]["y"]["field"] == "label_y"
            assert 1.0 < row["label_y"] < SWEEP_HEADROOM
            labels[row["text"].split()[0]] = (row["threshold"], mark["align"], mark["dx"])
    assert set(labels) == {"now", "suggested"}
    (t_now, a_now, dx_now), (t_sug, a_sug, dx_sug) = labels["now"], labels["suggested"]
    assert a_now != a_sug and dx_now * dx_sug < 0
    lower = "now" if t_now <= t_sug else "suggested"
    assert labels[lower][1] == "right"  # the lower threshold's label ends left of its rule


ANSWERS_CSV = (
    "question,document,page,answer\n"
    "What did Fermat write in the margin?,a-short-history-of-marginalia.md,,too narrow\n"
    "How should old books be stored?,caring-for-old-books.pdf,,upright\n"
    "Who won the 1998 chess olympiad?,,,\n"
)


def test_answer_metrics_on_the_page_equal_the_cli(app_env, tmp_path):
    import io
    import json

    from marginalia_core import cli
    from marginalia_core.chat.answer_metrics import ANSWER_METRICS

    ws = app_env
    path = tmp_path / "answers.csv"
    path.write_text(ANSWERS_CSV, encoding="utf-8")
    RetrievalLab(ws).import_set(path, name="with answers")
    at = start()
    section(at, "Question sets")
    editor = at.get("arrow_data_editor") or at.get("data_editor")
    assert editor  # the expected answers can be typed here
    section(at, "Evaluate and tune")
    at.button(key="inspector_evaluate_answers").click().run()
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["eval", "with answers", "--answers", "--db", ws.settings.db_path,
                     "--embedder", "local", "--answerer", "extractive"], out=out, err=err)
    assert code == 0, err.getvalue()
    printed = json.loads(out.getvalue().splitlines()[-1])["metrics"]
    labels = {"answer containment": "Answer contains", "first-sentence containment":
              "First sentence", "refusals (unanswerable)": "Refused (no answer)",
              "citation precision": "Citation precision", "citation recall": "Citation recall"}
    for key in ANSWER_METRICS:
        value = printed[key]
        assert shown[labels[key]] == ("–" if value is None else f"{value:.3f}"), key
    assert shown["Found"] == f"{printed['recall@6']:.3f}"  # retrieval beside it, same run
    assert printed["refusals (unanswerable)"] == 1.0  # nothing passes for the chess question
    table = html_table(at, "expected")
    assert [r["expected"] for r in table] == ["too narrow", "upright",
                                              "(no answer in the library)"]


def test_why_wasnt_it_found_and_rerun_with_the_fix(app_env):
    ws = app_env
    at = start()
    make_set(at, "why")
    section(at, "Evaluate and tune")
    at.button_group(key="inspector_mode").set_value("dense").run()
    at.slider(key="inspector_threshold").set_value(0.6).run()
    at.button(key="inspector_evaluate").click().run()
    assert not at.exception
    result = RetrievalLab(ws).evaluate("why", ev.EvalConfig(mode="dense", threshold=0.6, top_k=6,
                                                  alpha=RetrievalLab(ws).applied().alpha))
    missed = [(q.question_id, label) for q in result.questions for label in q.missed]
    assert missed  # 0.6 drops ticked passages
    at.button(key="inspector_why").click().run()
    assert not at.exception
    report = RetrievalLab(ws).why_missed("why", *missed[0], result.config)
    assert report.fix is not None
    shown = {m.label: m.value for m in at.metric}
    assert shown["By meaning"] == f"#{report.dense_rank}"
    assert shown["Dropped by"] == "threshold"
    at.button(key="inspector_why_rerun").click().run()
    assert not at.exception
    assert any(f"With {report.fix_label}, this passage is found" in m.value.replace("\\", "")
               for m in at.success)
    at.button(key="inspector_why_use").click().run()
    assert at.slider(key="inspector_threshold").value == pytest.approx(report.fix.threshold)


def test_compare_answers_of_a_and_b_as_the_cli_does(app_env, tmp_path):
    import io
    import json

    from marginalia_core import cli
    from marginalia_core.chat.answer_metrics import ANSWER_METRICS

    ws = app_env
    lab = RetrievalLab(ws)
    path = tmp_path / "answers.csv"
    path.write_text(ANSWERS_CSV, encoding="utf-8")
    lab.import_set(path, name="with answers")
    lab.save_config("a open", ev.EvalConfig(mode="hybrid", threshold=0.1, top_k=6))
    lab.save_config("b strict", ev.EvalConfig(mode="dense", threshold=0.6, top_k=2))
    at = start()
    section(at, "Compare")
    at.selectbox(key="inspector_cfg_a").set_value("a open").run()
    at.selectbox(key="inspector_cfg_b").set_value("b strict").run()
    at.button(key="inspector_compare_answers").click().run()
    assert not at.exception
    assert "**Answers: B against A**" in [m.value for m in at.markdown]
    table = html_table(at, "measure")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["eval", "with answers", "--answers", "--config", "a open", "--compare",
                     "b strict", "--db", ws.settings.db_path, "--embedder", "local",
                     "--answerer", "extractive"], out=out, err=err)
    assert code == 0, err.getvalue()
    runs = [json.loads(line) for line in out.getvalue().splitlines()
            if json.loads(line)["type"] == "answer_metrics"]
    assert [r["run"] for r in runs] == ["A (this)", "B (b strict)"]
    for row, key in zip(table, ANSWER_METRICS, strict=True):
        for side, run in (("A", runs[0]), ("B", runs[1])):
            value = run["metrics"][key]
            assert row[side] == ("–" if value is None else f"{value:.3f}"), (key, side)


def test_weight_chart_marks_the_weight_now_and_the_suggested_one():
    from marginalia_app.charts import weight_chart

    points = [ev.WeightPoint(a, {"ndcg@10": 0.5 + a / 4, "hit@1": 0.5}) for a in (0.2, 0.6, 1.0)]
    spec = weight_chart(ev.WeightSweep(0.2, points, 0.6), "ndcg@10").to_dict()
    texts = sorted(spec["datasets"][layer["data"]["name"]][0]["text"]
                   for layer in spec["layer"][1:])
    assert texts == ["now 0.40", "suggested 0.80"]  # keyword weights: 1 - alpha
