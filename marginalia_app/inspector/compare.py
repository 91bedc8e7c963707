"""Compare two saved configurations on a question set: metrics side by side and, per question,
the first relevant rank under each and the judgments gained or lost."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.inspector.common import (
    Controls,
    metric_row,
    pick_set,
    progress_callback,
    remember,
    run_guarded,
)
from marginalia_core.workspace import Workspace


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
    ca.caption(c.label(saved[a]))
    cb.caption(c.label(saved[b]))
    bar = st.empty()
    if st.button("Compare", type="primary", key="inspector_compare",
                 icon=":material/compare_arrows:"):
        cmp = run_guarded(lab.compare, name, a, b, progress=progress_callback(bar))
        if cmp is not None:
            state["inspector_cmp"] = (a, b, cmp)
    bar.empty()
    got = state.get("inspector_cmp")
    if got is None or got[2].set_name != name:
        return
    a, b, cmp = got
    k = cmp.b.config.top_k
    st.markdown(f"**B ({fmt.escape_inline(b)}) against A ({fmt.escape_inline(a)})** · "
                f"{cmp.better} question(s) better, {cmp.worse} worse")
    metric_row(cmp.b.metrics, k, cmp.a.metrics)
    rows = []
    for key in cmp.a.metrics:
        if key == "questions":
            continue
        va, vb = cmp.a.metrics[key], cmp.b.metrics.get(key, 0.0)
        rows.append({"measure": key, "A": round(va, 3), "B": round(vb, 3),
                     "change": round(vb - va, 3)})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    col = st.column_config
    st.dataframe(pd.DataFrame([
        {"question": d.question, "rank in A": d.rank_a, "rank in B": d.rank_b,
         "moved up": d.shift, "gained": ", ".join(d.gained), "lost": ", ".join(d.lost)}
        for d in cmp.deltas]), hide_index=True, width="stretch", key="inspector_deltas",
        column_config={"question": col.TextColumn(width=250),
                       "rank in A": col.NumberColumn(width=70),
                       "rank in B": col.NumberColumn(width=70),
                       "moved up": col.NumberColumn(
                           width=70, help="How many places B moved the first relevant "
                           "passage up"),
                       "gained": col.TextColumn(width=160),
                       "lost": col.TextColumn(width=160)})
