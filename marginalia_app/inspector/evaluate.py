"""Evaluate and tune: metrics of a question set under the controls, the threshold, keyword
weight and passage-size sweeps, and saving the controls as a named configuration."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.charts import sweep_chart, weight_chart
from marginalia_app.inspector.common import (
    Controls,
    metric_row,
    pick_set,
    progress_callback,
    run_guarded,
)
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.workspace import Workspace


def question_table(result: ev.EvalResult) -> pd.DataFrame:
    return pd.DataFrame([
        {"question": q.question, "first relevant at": q.first_relevant_rank,
         "found": f"{len(q.found)} of {len(q.found) + len(q.missed)}",
         "missed": "; ".join(q.missed),
         "recall": round(q.recall, 3),
         "precision": None if q.precision is None else round(q.precision, 3)}
        for q in result.questions
    ])


def show(ws: Workspace, c: Controls) -> None:
    name = pick_set(c.lab)
    if name is None:
        return
    st.caption("With the settings above: " + c.label())
    _buttons(c, name)
    state = st.session_state
    result: ev.EvalResult | None = state.get("inspector_result")
    if result is not None and result.set_name == name:
        _result(c, name, result)
    _sweeps(c)


def _buttons(c: Controls, name: str) -> None:
    lab, state = c.lab, st.session_state
    b = st.columns(5)
    bar = st.empty()
    if b[0].button("Evaluate", type="primary", key="inspector_evaluate",
                   icon=":material/analytics:"):
        result = run_guarded(lab.evaluate, name, c.config, progress=progress_callback(bar))
        if result is not None:
            state["inspector_result"] = result
    if b[1].button("Sweep the threshold", key="inspector_sweep_t",
                   icon=":material/show_chart:"):
        sweep = run_guarded(lab.threshold_sweep, name, mode=c.mode, top_k=c.top_k,
                            alpha=c.alpha)
        if sweep is not None:
            state["inspector_tsweep"] = sweep
    if b[2].button("Sweep the keyword weight", key="inspector_sweep_w",
                   icon=":material/balance:"):
        sweep = run_guarded(lab.weight_sweep, name, c.config)
        if sweep is not None:
            state["inspector_wsweep"] = sweep
    if b[3].button("Sweep passage size", key="inspector_sweep_c", icon=":material/view_week:",
                   help="Re-split and re-embed every document into a scratch index for each "
                   "size (800/100, 1400/200, 2000/300); embeddings are cached, so a second "
                   "sweep is fast. Any click (Cancel) stops it."):
        b[4].button("Cancel", key="inspector_cancel", icon=":material/cancel:")
        sweep = run_guarded(lab.chunk_sweep, name, config=c.config,
                            progress=progress_callback(bar))
        if sweep is not None:
            state["inspector_csweep"] = sweep
    bar.empty()


def _result(c: Controls, name: str, result: ev.EvalResult) -> None:
    st.markdown(f"**{fmt.escape_inline(name)}** · {c.label(result.config)}")
    metric_row(result.metrics, result.config.top_k)
    col = st.column_config
    st.dataframe(question_table(result), hide_index=True, width="stretch",
                 key="inspector_questions",
                 column_config={
                     "question": col.TextColumn(width=250),
                     "first relevant at": col.NumberColumn(
                         "rank", width=60, help="Rank of the first relevant passage "
                         f"(empty: not in the first {ev.DEPTH})"),
                     "found": col.TextColumn(
                         width=70, help="Ticked passages found in the passages returned"),
                     "missed": col.TextColumn(
                         width=250, help="Ticked passages not among those returned"),
                     "recall": col.NumberColumn(width=60),
                     "precision": col.NumberColumn(width=75),
                 })
    cname, csave = st.columns([3, 1], vertical_alignment="bottom")
    label = cname.text_input("Save these settings as", key="inspector_cfg_name",
                             placeholder="e.g. strict")
    if csave.button("Save configuration", key="inspector_save_cfg",
                    icon=":material/bookmark_add:", disabled=not label.strip()) and \
            run_guarded(lambda: c.lab.save_config(label.strip(), c.config) or True):
        st.success(f"Saved {fmt.escape_inline(label.strip())}.", icon=":material/check_circle:")


def _sweeps(c: Controls) -> None:
    state = st.session_state
    tsweep: ev.ThresholdSweep | None = state.get("inspector_tsweep")
    if tsweep is not None:
        st.markdown(f"**Threshold sweep** · suggested {tsweep.suggested:.2f} (best F1)",
                    help="Precision and recall of the passages returned at each threshold; "
                    "F1 balances them.")
        st.altair_chart(sweep_chart(tsweep, c.threshold), width="stretch")

        def use_suggested(value: float = tsweep.suggested) -> None:
            state["inspector_threshold"] = max(0.0, min(1.0, float(value)))

        st.button(f"Use the suggested threshold {tsweep.suggested:.2f}", on_click=use_suggested,
                  key="inspector_use_suggested")
    wsweep: ev.WeightSweep | None = state.get("inspector_wsweep")
    if wsweep is not None:
        best = c.lab.keyword_weight(ev.EvalConfig(mode="hybrid", alpha=wsweep.best))
        st.markdown(f"**Keyword weight sweep** · best {best:.2f}")
        st.altair_chart(weight_chart(wsweep, "ndcg@10"), width="stretch")
    csweep = state.get("inspector_csweep")
    if csweep is not None:
        st.markdown(f"**Passage size sweep** · best {csweep.best[0]} / {csweep.best[1]}")
        st.dataframe(pd.DataFrame([
            {"passage size": p.target, "overlap": p.overlap, "passages": p.chunks,
             "embedded now": p.embedded_now, **{k: round(v, 3) for k, v in
                                                 p.result.metrics.items() if k != "questions"}}
            for p in csweep.points]), hide_index=True, width="stretch")
