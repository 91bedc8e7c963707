""""Why wasn't it found?": for a passage a question missed, where it ranks by meaning, by
keywords and fused, which setting dropped it, and one click to rerun the set with the setting
that includes it, showing what else changes."""

from __future__ import annotations

import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.inspector.common import Controls, load_into_controls, metric_row, run_guarded
from marginalia_app.inspector.tables import Column, show_table
from marginalia_core.lab import MissReport
from marginalia_core.retrieval import evaluation as ev

REASONS = {  # short enough for a metric's value at 1280 px
    "found": "nothing", "threshold": "threshold", "top_k": "top-k",
    "fusion_weight": "keyword weight", "mode": "method", "document_scope": "documents",
    "passage_boundary": "boundaries",
}
DELTA_COLUMNS = (
    Column("question", "question"), Column("a", "rank now", numeric=True, fmt="d"),
    Column("b", "rank with the change", numeric=True, fmt="d"),
    Column("gained", "gained"), Column("lost", "lost"),
)


def show(c: Controls, name: str, result: ev.EvalResult) -> None:
    state = st.session_state
    missed = [(q.question_id, q.question, label) for q in result.questions for label in q.missed]
    if not missed:
        return
    st.markdown("**Why wasn't it found?**",
                help="Pick a ticked passage the settings missed: see where it ranks and "
                "which setting dropped it, then rerun with the setting that includes it.")
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    pick = row.selectbox(
        "Missed passage", range(len(missed)), key="inspector_why_pick", width=560,
        format_func=lambda n: f"{missed[n][1][:70]} — {missed[n][2]}",
    )
    if row.button("Why wasn't it found?", key="inspector_why", icon=":material/help:"):
        qid, _, label = missed[pick]
        report = run_guarded(c.lab.why_missed, name, qid, label, result.config)
        if report is not None:
            state["inspector_why_report"] = (name, result.config, report)
            state.pop("inspector_why_cmp", None)
    got = state.get("inspector_why_report")
    if got is None or got[0] != name:
        return
    _report(c, name, got[1], got[2])


def _report(c: Controls, name: str, config: ev.EvalConfig, r: MissReport) -> None:
    state = st.session_state
    with st.container(border=True, key="inspector_why_card"):
        st.markdown(f"**{fmt.escape_inline(r.question, 120)}** · "
                    f"{fmt.escape_inline(r.judgment, 100)}")
        m = st.columns(4)
        m[0].metric("By meaning", "–" if r.dense_rank is None else f"#{r.dense_rank}",
                    help="Rank by cosine among every passage of the library, and the cosine")
        m[0].caption("–" if r.cosine is None else f"cosine {r.cosine:.3f}")
        m[1].metric("By keywords", "–" if r.bm25_rank is None else f"#{r.bm25_rank}",
                    help="Rank by BM25 (– : no word of the question is in it), and the score")
        m[1].caption("no keyword match" if r.bm25 is None else f"BM25 {r.bm25:.2f}")
        m[2].metric("Fused", "–" if r.fused_rank is None else f"#{r.fused_rank}",
                    help="Rank in the settings' own order, before the threshold")
        m[3].metric("Dropped by", REASONS.get(r.reason, r.reason),
                    help="The setting that kept it out: the relevance threshold, the number of "
                    "passages returned (top-k), the keyword weight, the search method, the "
                    "documents searched, or passage boundaries that split it")
        (st.success if r.reason == "found" else st.info)(
            fmt.escape_inline(r.explanation), icon=":material/search_insights:")
        if r.content:
            pages = fmt.page_label(r.page_start, r.page_end, r.mime) if r.page_start else ""
            with st.expander(" · ".join(x for x in (r.document, pages) if x)
                             + " — the whole passage"):
                body, _ = margin.passage_html(r.content, r.mime)
                st.html(f'<div class="mg-passage">{body}</div>')
        if r.fix is not None and st.button(f"Rerun with {r.fix_label}", type="primary",
                                           key="inspector_why_rerun", icon=":material/replay:"):
            cmp = run_guarded(c.lab.compare, name, config, r.fix)
            if cmp is not None:
                state["inspector_why_cmp"] = cmp
        cmp: ev.Comparison | None = state.get("inspector_why_cmp")
        if cmp is not None and r.fix is not None:
            _rerun(c, r, cmp)


def _rerun(c: Controls, r: MissReport, cmp: ev.Comparison) -> None:
    mine = next((q for q in cmp.b.questions if q.question == r.question), None)
    if mine is not None:
        found = r.judgment in mine.found
        (st.success if found else st.warning)(
            f"With {r.fix_label}, this passage is "
            + ("found." if found else "still not among those returned."),
            icon=":material/check_circle:" if found else ":material/warning:")
    st.caption(f"What else changes on the set: {fmt.plural(cmp.better, 'question')} better, "
               f"{cmp.worse} worse (change against the settings now).")
    metric_row(cmp.b.metrics, cmp.b.config.top_k, cmp.a.metrics)
    changed = [d for d in cmp.deltas if d.gained or d.lost or d.shift]
    if changed:
        show_table([{"question": d.question, "a": d.rank_a, "b": d.rank_b,
                     "gained": "; ".join(d.gained), "lost": "; ".join(d.lost)}
                    for d in changed], DELTA_COLUMNS)
    st.button(f"Use {r.fix_label} in the settings above", key="inspector_why_use",
              icon=":material/tune:", on_click=load_into_controls,
              args=(c.lab, r.fix, f"The settings now have {r.fix_label}."))
