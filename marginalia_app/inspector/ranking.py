""""Why passages rank": every candidate's cosine, BM25 and fused rank for the question, the
relevance histogram, and the selected passage in full."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.charts import histogram
from marginalia_app.inspector.common import MODE_LABELS, Controls, keep, remember
from marginalia_core.workspace import Workspace

ORDER_KEY = {"hybrid": "fused_rank", "dense": "dense_rank", "lexical": "lexical_rank"}
ORDER_LABEL = {"hybrid": "the hybrid score", "dense": "the meaning rank",
               "lexical": "the keyword rank"}
# what "passes" means in each mode: the threshold step retrieval applies (Retriever.passing)
PASSES_HELP = {
    "hybrid": "Kept by the threshold step: cosine ≥ {:.2f}, or holds every keyword",
    "dense": "Kept by the threshold step: cosine ≥ {:.2f}",
    "lexical": "Kept by the keyword floor: holds enough of the question's keyword weight and "
               "is not unrelated in meaning (the relevance threshold is not used)",
}


@st.cache_data(max_entries=64, show_spinner=False)
def score_rows(query: str, generation: int, embedder_key: str, _ws: Workspace) -> list[dict]:
    """Every chunk's cosine for ``query`` (the histogram); recomputed when documents change."""
    return _ws.score_table(query)


def show(ws: Workspace, c: Controls) -> None:
    if not c.q:
        st.caption("Type a question to see how every passage scores.")
        return
    lab, q, mode, threshold = c.lab, c.q, c.mode, c.threshold
    df = pd.DataFrame(score_rows(q, ws.store.generation(), lab.embedder_key(), ws))
    df["passes"] = df["score"] >= threshold
    hits = lab.search(q, k=c.top_k, threshold=threshold, mode=mode, alpha=c.alpha,
                      reranker=c.config.reranker)
    returned = {h.chunk_id: h.rank for h in hits}
    explained = lab.explain(q, threshold=threshold, alpha=c.alpha, mode=mode)

    m = st.columns(4)
    m[0].metric("Passages passing", f"{int(df['passes'].sum())} of {len(df)}",
                help=f"Passages whose cosine passes the relevance threshold (≥ {threshold:.2f})")
    m[1].metric("Best relevance", f"{df['score'].max():.3f}" if len(df) else "–",
                help="Highest cosine similarity")
    m[2].metric(f"{MODE_LABELS[mode]} returns", len(hits), help=f"at most {c.top_k} passages")
    m[3].metric("Threshold", f"{threshold:.2f}",
                delta=None if abs(threshold - c.chat_threshold) < 1e-9
                else f"{threshold - c.chat_threshold:+.2f} vs Chat", delta_color="off")

    names = sorted({r.document_name for r in explained})
    chosen = st.multiselect("Documents", names, key=keep("inspector_docs", []),
                            placeholder="All documents", help="Show only these documents")
    remember()
    order_key = ORDER_KEY[mode]
    shown = sorted(
        (r for r in explained if not chosen or r.document_name in chosen),
        key=lambda r: (getattr(r, order_key) is None, getattr(r, order_key) or 0),
    )
    table = pd.DataFrame([
        {"returned": fmt.sortable_number(returned.get(r.chunk_id), "d", 3),
         "document": r.document_name,
         "page": fmt.page_label(r.page_start, r.page_end, r.mime,
                                r.location).split(" ", 1)[-1],
         "hybrid score": round(r.fused, 4), "hybrid rank": r.fused_rank,
         "cosine": round(r.cosine, 4), "meaning rank": r.dense_rank,
         "bm25": fmt.sortable_number(r.bm25 if r.lexical_rank else None, ".2f", 9),
         "keyword rank": fmt.sortable_number(r.lexical_rank, "d", 4),
         "passes": r.passes,
         "excerpt": r.excerpt}
        for r in shown
    ], columns=["returned", "document", "page", "hybrid score", "hybrid rank", "cosine",
                "meaning rank", "bm25", "keyword rank", "passes", "excerpt"])

    used = ""
    if mode == "hybrid":
        used = f" · keyword weight for this question {1 - lab.query_alpha(q, c.alpha):.2f}"
    st.markdown(f"**Why each passage ranked** · {MODE_LABELS[mode]}{used}",
                help=f"The {len(explained)} passages the meaning or keyword search proposed, "
                f"ordered by {ORDER_LABEL[mode]}. Select a row to read the whole passage."
                + (" The keyword weight you set is adapted to each question: the list whose "
                   "best passages stand out more clearly from the rest counts for more."
                   if mode == "hybrid" else ""))
    picked = st.dataframe(
        table, hide_index=True, width="stretch", height=360,
        on_select="rerun", selection_mode="single-row", key="inspector_table",
        column_config=_columns(mode, c.top_k, threshold),
    )
    if not len(table):
        st.caption("No passage of the chosen documents was proposed.")
        return
    row = shown[(picked.selection.rows or [0])[0]]
    passage_col, chart_col = st.columns([3, 2], gap="large")
    with chart_col:
        st.markdown("**Relevance of every passage**")
        if len(df):
            st.altair_chart(histogram(df, threshold), width="stretch")
    with passage_col, st.container(border=True, key="inspector_passage"):
        where = [fmt.page_label(row.page_start, row.page_end, row.mime, row.location),
                 f"passage {row.idx}"]
        st.markdown(
            f"**{fmt.escape_inline(row.document_name, 80)}** · "
            + " · ".join(w for w in where if w)
            + f" · cosine {row.cosine:.3f} · BM25 {row.bm25:.2f}"
            + ("" if picked.selection.rows else " · select a row to see another passage")
        )
        st.html(margin.terms_html(row.content, row.mime, lab.query_terms(q)))


def _columns(mode: str, top_k: int, threshold: float) -> dict:
    col = st.column_config
    return {
        "returned": col.TextColumn(
            "returned", width=70, alignment="right", help=f"Rank among the passages "
            f"{MODE_LABELS[mode]} returns (top {top_k}); empty = not returned"),
        "document": col.TextColumn(width=175),
        "page": col.TextColumn(width=45),
        "hybrid score": col.NumberColumn(
            "hybrid", format="%.4f", width=65, help="The fused score the hybrid order is sorted by"),
        "hybrid rank": col.NumberColumn("rank", width=40, help="Hybrid rank"),
        "cosine": col.ProgressColumn(
            "meaning", min_value=0.0, max_value=1.0, format="%.3f", width=85,
            help="Cosine similarity of the question and the passage"),
        "meaning rank": col.NumberColumn("rank", width=40, help="Rank by meaning (cosine)"),
        "bm25": col.TextColumn(
            "keywords", width=70, alignment="right",
            help="BM25 keyword score (empty: no word of the question matched)"),
        "keyword rank": col.TextColumn(
            "rank", width=40, alignment="right", help="Rank by keywords (BM25)"),
        "passes": col.CheckboxColumn(width=55, help=PASSES_HELP[mode].format(threshold)),
        "excerpt": col.TextColumn(width=90),
    }
