"""Passage size on one document: how it would split with another size and overlap, then
re-index it."""

from __future__ import annotations

import html

import altair as alt
import pandas as pd
import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import watch
from marginalia_app.inspector.common import Controls
from marginalia_app.inspector.tables import Column, show_table
from marginalia_core.store.records import Document
from marginalia_core.workspace import Workspace

PREVIEW_WORDS = 14  # words of a passage the preview shows before it is opened
PREVIEW_ROWS = 8  # more passages than this scroll inside a box PREVIEW_HEIGHT px tall
PREVIEW_HEIGHT = 460
PREVIEW_COLUMNS = (
    Column("chunk", "passage", numeric=True, fmt="d"), Column("pages", "pages"),
    Column("length", "characters", numeric=True, fmt="d"),
    Column("overlap", "overlap", numeric=True, fmt="d"), Column("text", "text", html=True),
)


def show(ws: Workspace, c: Controls) -> None:
    state = st.session_state
    st.caption("Try other passage sizes on one document: see how it would split, then "
               "re-index it.")
    by_id = {d.id: d for d in ws.documents()}
    doc_id = st.selectbox(
        "Document", list(by_id),
        format_func=lambda i: f"{by_id[i].name} ({by_id[i].chunk_count} passages)",
        key="lab_document",
    )
    doc = by_id[doc_id]
    cols = st.columns([1, 1, 2], vertical_alignment="bottom")
    d_target = int(cols[0].number_input(
        "Passage size (characters)", min_value=100, max_value=20_000, step=100,
        value=doc.chunk_target, key=f"lab-target-{doc_id}",
        help="Chunk TARGET",
    ))
    d_overlap = int(cols[1].number_input(
        "Overlap (characters)", min_value=0, max_value=10_000, step=50,
        value=doc.chunk_overlap,
        key=f"lab-overlap-{doc_id}", help="Chunk OVERLAP",
    ))
    preview_ = ws.chunk_preview(doc_id, target=d_target, overlap=d_overlap)
    used_overlap = preview_.overlap
    cols[2].caption(
        f"Now split into passages of {doc.chunk_target} characters, overlap "
        f"{doc.chunk_overlap}."
        + (f" An overlap above half the size is clamped to {used_overlap}."
           if used_overlap != d_overlap else "")
    )
    chunks, stats = preview_.chunks, preview_.stats
    m = st.columns(4)
    m[0].metric("Passages", stats["count"], delta=stats["count"] - doc.chunk_count or None,
                delta_color="off")
    m[1].metric("Mean length", f"{stats['mean_len']:.0f}")
    m[2].metric("Shortest – longest", f"{stats['min_len']} – {stats['max_len']}")
    m[3].metric("Mean overlap", f"{stats['mean_overlap']:.0f}")
    preview = pd.DataFrame([
        {"chunk": ch.idx,
         "pages": fmt.document_place(doc, ch.page_start, ch.page_end),
         "length": len(ch.text),
         "overlap": max(0, chunks[ch.idx - 1].end - ch.start) if ch.idx else 0,
         "text": " ".join(ch.text.split())}
        for ch in chunks
    ])
    dist_col, table_col = st.columns([2, 3], gap="large")
    with dist_col:
        st.markdown("**Passage lengths**")
        if len(preview):
            st.altair_chart(
                alt.Chart(preview).mark_bar(color="#2f7d6d").encode(
                    x=alt.X("length:Q", bin=alt.Bin(maxbins=20), title="Characters"),
                    y=alt.Y("count():Q", title="Passages",
                            axis=alt.Axis(tickMinStep=1, format="d")),
                ).properties(height=200),
                width="stretch",
            )
    with table_col:
        st.markdown("**Preview**")
        rows = [{**r, "text": _passage(ch.text, doc.mime)}
                for r, ch in zip(preview.to_dict("records"), chunks, strict=True)]
        with st.container(height=PREVIEW_HEIGHT if len(rows) > PREVIEW_ROWS else "content",
                          key="lab_preview"):
            show_table(rows, PREVIEW_COLUMNS)
    _reindex(ws, doc, d_target, used_overlap, preview_.unchanged)
    if flash_ := state.pop("lab_flash", None):
        st.success(fmt.escape_inline(flash_), icon=":material/check_circle:")


def _passage(text: str, mime: str) -> str:
    """A passage as its first words, opening to the whole of it (HTML for the table)."""
    words = text.split()
    first = " ".join(words[:PREVIEW_WORDS]) + ("…" if len(words) > PREVIEW_WORDS else "")
    return (f"<details><summary>{html.escape(first)}</summary>"
            f"{margin.terms_html(text, mime, [])}</details>")


def _reindex(ws: Workspace, doc: Document, target: int, overlap: int, unchanged: bool) -> None:
    if st.button(
        f"Re-index {fmt.escape_inline(doc.name, 60)} with passage size {target}, "
        f"overlap {overlap}",
        type="primary", icon=":material/sync:", disabled=unchanged, key="lab_reindex",
        help="Already indexed with these settings" if unchanged else None,
    ):
        outcome = watch(f"{doc.name} (re-indexing)",
                        ws.reindex(doc.id, target=target, overlap=overlap), doc.name)
        if outcome.state == "indexed":
            st.session_state["lab_flash"] = (
                f"{doc.name} was re-indexed into {outcome.chunks} passages.")
            st.rerun()
