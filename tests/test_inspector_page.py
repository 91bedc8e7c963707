"""The Inspector's retrieval lab through AppTest (the real app, core and a temporary database):
make a question set by ticking passages, evaluate it, sweep the threshold, save and compare two
configurations, apply one to Chat, and keep the controls across page switches."""

from __future__ import annotations

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
    per_q = next(d.value for d in at.dataframe if "first relevant at" in d.value.columns)
    assert ranks(per_q["first relevant at"]) == [
        q.first_relevant_rank for q in expected.questions]
    assert per_q["first relevant at"].notna().all()  # every ticked passage is found again
    assert list(per_q["found"]) == [
        f"{len(q.found)} of {len(q.found) + len(q.missed)}" for q in expected.questions]
    assert list(per_q["missed"]) == ["; ".join(q.missed) for q in expected.questions]

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
    deltas = next(d.value for d in at.dataframe if "rank in A" in d.value.columns)
    assert ranks(deltas["rank in A"]) == [d.rank_a for d in cmp.deltas]
    assert ranks(deltas["rank in B"]) == [d.rank_b for d in cmp.deltas]
    assert cmp.better >= 1  # the strict threshold loses passages the suggested one finds
    assert any(f"{cmp.better} question(s) better, {cmp.worse} worse" in m.value
               for m in at.markdown)


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
    (answer,) = [m for m in ws.messages(cid) if m["role"] == "assistant"]
    assert 1 <= len(answer["sources"]) <= 2

    at.switch_page(INSPECTOR).run()
    assert not at.exception
    assert at.text_input(key="inspector_query").value == "What did Fermat write in the margin?"
    assert at.button_group(key="inspector_mode").value == "lexical"
    assert at.number_input(key="inspector_k").value == 2


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
    best = 0.55 if sweep.best is None else sweep.best
    assert f"**Keyword weight sweep** · best {1 - best:.2f}" in [m.value for m in at.markdown]
    assert len(at.get("vega_lite_chart")) == charts_before + 1

    at.button(key="inspector_sweep_c").click().run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "passage size" in d.value.columns)
    assert table["passage size"].tolist() == [800, 1400, 2000]
    assert table["embedded now"].tolist()[1] == 0  # the library's own passages: no embedding
    assert (table["passages"].diff().dropna() <= 0).all()  # bigger passages, fewer of them
    assert not list(ws.store.conn.execute(
        "SELECT 1 FROM documents WHERE chunk_target != 1400"))  # the library is untouched


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
