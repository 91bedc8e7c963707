"""Compare two saved configurations on a question set: metrics side by side and, per question,
the first relevant rank under each and the passages gained or lost; answers too; apply A or B
to Chat."""

from __future__ import annotations

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.inspector import answers
from marginalia_app.inspector.common import (
    Controls,
    apply_later,
    metric_row,
    pick_set,
    progress_callback,
    remember,
    run_guarded,
)
from marginalia_app.inspector.tables import Column, change, passages_cell, show_table
from marginalia_core.workspace import Workspace

MEASURE_COLUMNS = (Column("measure", "measure"), Column("a", "A", numeric=True),
                   Column("b", "B", numeric=True),
                   Column("change", "change", numeric=True, html=True))
DELTA_COLUMNS = (
    Column("question", "question"), Column("a", "rank in A", numeric=True, fmt="d"),
    Column("b", "rank in B", numeric=True, fmt="d"),
    Column("up", "moved up", numeric=True, html=True),
    Column("gained", "gained in B", html=True), Column("lost", "lost in B", html=True),
)


def show(ws: Workspace, c: Controls) -> None:
    lab, state = c.lab, st.session_state
    name = pick_set(lab)
    if name is None:
        return
    saved = lab.configs()
    if len(saved) < 2:
        st.info("Save two configurations first (Evaluate and tune → Save configuration).",
                icon=":material/info:")
        return
    names = list(saved)
    for key, default in (("inspector_cfg_a", names[0]), ("inspector_cfg_b", names[1])):
        if state.get(key) not in names:
            state[key] = default
    ca, cb = st.columns(2)
    a = ca.selectbox("A", names, key="inspector_cfg_a")
    b = cb.selectbox("B", names, key="inspector_cfg_b")
    remember()
    for col, side, cname in ((ca, "A", a), (cb, "B", b)):
        col.caption(c.label(saved[cname]))
        same = lab.same_effect(saved[cname], c.applied)
        col.button(f"Apply {side} to Chat", key=f"inspector_apply_{side.lower()}",
                   icon=":material/done_all:", disabled=same,
                   help="Chat uses it already" if same else
                   f"Put “{cname}” into the settings above and apply it to Chat",
                   on_click=apply_later, args=(lab, saved[cname], f"“{cname}” ({side})"))
    bar = st.empty()
    row = st.container(horizontal=True, gap="small")
    if row.button("Compare", type="primary", key="inspector_compare",
                  icon=":material/compare_arrows:"):
        cmp = run_guarded(lab.compare, name, a, b, progress=progress_callback(bar))
        if cmp is not None:
            state["inspector_cmp"] = (a, b, cmp)
    answers.compare_button(lab, name, a, b, row)
    bar.empty()
    got = state.get("inspector_cmp")
    if got is not None and got[2].set_name == name:
        _results(c, name, *got)
    answers.compare(name, a, b)


def _results(c: Controls, name: str, a: str, b: str, cmp) -> None:
    lab = c.lab
    k = cmp.b.config.top_k
    st.markdown(f"**B ({fmt.escape_inline(b)}) against A ({fmt.escape_inline(a)})** · "
                f"{fmt.plural(cmp.better, 'question')} better, {cmp.worse} worse")
    metric_row(cmp.b.metrics, k, cmp.a.metrics)
    show_table([{"measure": key, "a": cmp.a.metrics[key], "b": cmp.b.metrics.get(key, 0.0),
                 "change": change(cmp.b.metrics.get(key, 0.0) - cmp.a.metrics[key])}
                for key in cmp.a.metrics if key != "questions"], MEASURE_COLUMNS)
    judged = lab.judged_passages(name)
    show_table([{"question": d.question, "a": d.rank_a, "b": d.rank_b,
                 "up": change(d.shift, "+d") if d.shift is not None else None,
                 "gained": passages_cell(d.gained, judged),
                 "lost": passages_cell(d.lost, judged)}
                for d in cmp.deltas], DELTA_COLUMNS)
