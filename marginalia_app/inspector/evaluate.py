"""Evaluate and tune: metrics of a question set under the controls (retrieval, and answers
when the set has expected answers), "why wasn't it found?" for a missed passage, the threshold,
keyword-weight and passage-size sweeps with their suggestions, and saving the controls as a
named configuration."""

from __future__ import annotations

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.inspector import answers, sweeps, why
from marginalia_app.inspector.common import (
    Controls,
    metric_row,
    pick_set,
    progress_callback,
    run_guarded,
)
from marginalia_app.inspector.tables import Column, passages_cell, show_table
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.workspace import Workspace

QUESTION_COLUMNS = (
    Column("question", "question"), Column("rank", "first relevant at", numeric=True),
    Column("found", "found", html=True), Column("missed", "missed", html=True),
    Column("recall", "recall", numeric=True), Column("precision", "precision", numeric=True),
)


def show(ws: Workspace, c: Controls) -> None:
    name = pick_set(c.lab)
    if name is None:
        return
    st.caption("With the settings above: " + c.label())
    floor = st.number_input(
        "Recall to keep", min_value=0.0, max_value=1.0, step=0.05, value=None,
        key="inspector_floor", placeholder=f"{ev.RECALL_FLOOR_SHARE:.0%} of the recall now",
        help="A suggestion never finds fewer of the ticked passages than this (recall@k). "
        f"Empty: {ev.RECALL_FLOOR_SHARE:.0%} of what the settings above find.", width=220)
    _buttons(c, name, floor)
    state = st.session_state
    result: ev.EvalResult | None = state.get("inspector_result")
    if result is not None and result.set_name == name:
        _result(c, name, result)
        why.show(c, name, result)
    answers.show_result(c, name)
    sweeps.show(c, name)
    _save(c)


def _buttons(c: Controls, name: str, floor: float | None) -> None:
    lab, state = c.lab, st.session_state
    row = st.container(horizontal=True, gap="small")
    bar = st.empty()
    if row.button("Evaluate", type="primary", key="inspector_evaluate",
                  icon=":material/analytics:"):
        result = run_guarded(lab.evaluate, name, c.config, progress=progress_callback(bar))
        if result is not None:
            state["inspector_result"] = result
            state.pop("inspector_why_report", None)
    if row.button("Evaluate answers", key="inspector_evaluate_answers",
                  icon=":material/fact_check:",
                  help="Answer every question with the answerer Chat uses, from the passages "
                  "these settings return, and measure the answers against the expected ones "
                  "(Question sets → Expected answers)"):
        got = run_guarded(lab.evaluate_answers, name, c.config,
                          progress=progress_callback(bar))
        if got is not None:
            state["inspector_answers"] = got
            state["inspector_result"] = got.retrieval
    if row.button("Sweep the threshold", key="inspector_sweep_t", icon=":material/show_chart:"):
        sweep = run_guarded(lab.threshold_sweep, name, mode=c.mode, top_k=c.top_k,
                            alpha=c.alpha, current=c.threshold, floor=floor)
        if sweep is not None:
            state["inspector_tsweep"] = sweep
    if row.button("Sweep the keyword weight", key="inspector_sweep_w",
                  icon=":material/balance:"):
        sweep = run_guarded(lab.weight_sweep, name, c.config, floor=floor)
        if sweep is not None:
            state["inspector_wsweep"] = sweep
    if row.button("Sweep passage size", key="inspector_sweep_c", icon=":material/view_week:",
                  help="Re-split every document into a scratch index for each size "
                  "(800/100, 1400/200, 2000/300 and the size above); it embeds only text no "
                  "earlier run has embedded, and says how much before it starts."):
        state["inspector_csweep_ask"] = (name, floor)
    sweeps.passage_size_run(c, name, row, bar)
    bar.empty()


def _result(c: Controls, name: str, result: ev.EvalResult) -> None:
    st.markdown(f"**{fmt.escape_inline(name)}** · {c.label(result.config)}")
    metric_row(result.metrics, result.config.top_k)
    judged = c.lab.judged_passages(name)
    rows = [{"question": q.question, "rank": q.first_relevant_rank,
             "found": passages_cell(q.found, judged), "missed": passages_cell(q.missed, judged),
             "recall": q.recall, "precision": q.precision}
            for q in result.questions if q.judgments]
    st.caption(f"Per question: the rank of the first ticked passage (– : not in the first "
               f"{ev.DEPTH}); open a passage to read it whole.")
    show_table(rows, QUESTION_COLUMNS)


def _save(c: Controls) -> None:
    cname, csave = st.columns([3, 1], vertical_alignment="bottom")
    label = cname.text_input("Save these settings as", key="inspector_cfg_name",
                             placeholder="e.g. strict")
    if csave.button("Save configuration", key="inspector_save_cfg",
                    icon=":material/bookmark_add:", disabled=not label.strip()) and \
            run_guarded(lambda: c.lab.save_config(label.strip(), c.config) or True):
        st.success(f"Saved {fmt.escape_inline(label.strip())}.", icon=":material/check_circle:")
