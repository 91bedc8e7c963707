"""Retrieval Inspector: every chunk's cosine score for a query, the threshold and its effect,
what each retrieval mode returns, and a chunking lab (TARGET / OVERLAP -> preview -> re-index)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.ingest_view import watch
from marginalia_app.shell import DOCUMENTS_PAGE, page
from marginalia_core.config import RETRIEVAL_MODES
from marginalia_core.retrieval.retriever import make_excerpt
from marginalia_core.workspace import Workspace

ws = page()
settings = ws.settings
state = st.session_state

TABLE_COLUMNS = ["document", "chunk", "page", "score", "rank", "passes", "bm25", "excerpt"]
MODE_HELP = {
    "hybrid": "cosine and BM25 rankings fused; the threshold applies to the cosine",
    "dense": "cosine similarity only",
    "lexical": "BM25 keyword matches only; the threshold does not apply",
}


@st.cache_data(max_entries=64, show_spinner=False)
def score_rows(query: str, generation: int, embedder_key: str, _ws: Workspace) -> list[dict]:
    """Every chunk's score for ``query``; recomputed when the documents change."""
    return _ws.score_table(query)


@st.cache_data(max_entries=64, show_spinner=False)
def search_rows(
    query: str, mode: str, k: int, threshold: float, generation: int, embedder_key: str,
    _ws: Workspace,
) -> list[dict]:
    hits = _ws.search(query, k=k, threshold=threshold, mode=mode)
    return [
        {
            "rank": h.rank,
            "document": h.document_name,
            "chunk": h.idx,
            "page": fmt.page_label(h.page_start, h.page_end).removeprefix("p. "),
            "score": round(h.score, 4),
            "bm25": None if h.lexical_score is None else round(h.lexical_score, 3),
            "chunk_id": h.chunk_id,
        }
        for h in hits
    ]


def histogram(df: pd.DataFrame, threshold: float) -> alt.LayerChart:
    low = min(0.0, float(df["score"].min()))
    data = df.assign(side=df["passes"].map({True: "passes", False: "below threshold"}))
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("score:Q", bin=alt.Bin(extent=[low, 1.0], step=0.025), title="Cosine score"),
            y=alt.Y("count():Q", title="Chunks", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color(
                "side:N",
                scale=alt.Scale(domain=["passes", "below threshold"], range=["#2f7d6d", "#a7a29a"]),
                legend=alt.Legend(title=None, orient="top"),
            ),
            tooltip=[alt.Tooltip("count():Q", title="chunks")],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"threshold": [threshold]}))
        .mark_rule(color="#c0392b", strokeWidth=2, strokeDash=[5, 3])
        .encode(x="threshold:Q", tooltip=[alt.Tooltip("threshold:Q", format=".2f")])
    )
    label = (
        alt.Chart(pd.DataFrame({"threshold": [threshold], "text": [f"threshold {threshold:.2f}"]}))
        .mark_text(align="left", dx=5, dy=-6, color="#c0392b", fontWeight="bold")
        .encode(x="threshold:Q", y=alt.value(8), text="text:N")
    )
    return (bars + rule + label).properties(height=240)


st.title("Retrieval Inspector", anchor=False)
st.caption(
    "How every passage scores against a question, what the threshold keeps, and how other "
    "passage sizes would split a document."
)

documents = ws.documents()
if not documents:
    st.info("There is nothing to inspect yet: add documents first.", icon=":material/info:")
    st.page_link(DOCUMENTS_PAGE, label="Go to Documents", icon=":material/library_books:")
    st.stop()

embedder = ws.embedder
default_threshold = float(ws.retriever.threshold)
mismatch = ws.mismatch()
if mismatch is not None:
    st.warning(fmt.escape_inline(mismatch.message), icon=":material/sync_problem:")

# ---- query and controls
query = st.text_input(
    "Query",
    key="inspector_query",
    placeholder="Type a question, e.g. “What did Fermat write in the margin?”",
)
controls = st.columns([3, 2, 1], gap="medium", vertical_alignment="bottom")
with controls[0]:
    threshold = st.slider(
        "Threshold (cosine)",
        min_value=0.0,
        max_value=1.0,
        value=default_threshold,
        step=0.01,
        key="inspector_threshold",
        help=f"Starts at {embedder.model}'s default, {default_threshold:.2f}. Chunks scoring "
        "below it are dropped in dense and hybrid retrieval.",
    )
with controls[1]:
    mode = st.segmented_control(
        "Retrieval mode",
        list(RETRIEVAL_MODES),
        default=settings.retrieval_mode,
        key="inspector_mode",
        required=True,
        help="; ".join(f"{m}: {h}" for m, h in MODE_HELP.items()),
    ) or settings.retrieval_mode
with controls[2]:
    top_k = int(st.number_input("Top k", min_value=1, max_value=50, value=settings.top_k,
                                key="inspector_k"))

generation = ws.store.generation()
if query.strip():
    rows = score_rows(query.strip(), generation, embedder.key, ws)
    df = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "chunk_id", "document_id"])
    df["passes"] = df["score"] >= threshold
    df = df.sort_values(["score", "chunk_id"], ascending=[False, True]).reset_index(drop=True)
    passing = int(df["passes"].sum())
    hits = search_rows(query.strip(), mode, top_k, threshold, generation, embedder.key, ws)
    returned = {h["chunk_id"] for h in hits}
    df["returned"] = df["chunk_id"].isin(returned)

    metrics = st.columns(4)
    metrics[0].metric("Chunks passing the threshold", f"{passing} of {len(df)}",
                      help=f"score ≥ {threshold:.2f}")
    metrics[1].metric("Best score", f"{df['score'].max():.3f}" if len(df) else "–")
    metrics[2].metric(f"{mode.capitalize()} search returns", len(hits),
                      help=f"top {top_k}; {MODE_HELP[mode]}")
    metrics[3].metric("Threshold", f"{threshold:.2f}",
                      delta=None if abs(threshold - default_threshold) < 1e-9
                      else f"{threshold - default_threshold:+.2f} vs default",
                      delta_color="off")

    chart_col, hits_col = st.columns([1, 1], gap="large")
    with chart_col:
        st.markdown("**Score distribution**")
        if len(df):
            st.altair_chart(histogram(df, threshold), width="stretch")
    with hits_col:
        st.markdown(f"**What search() returns** · {mode}, top {top_k}")
        if hits:
            st.dataframe(
                pd.DataFrame(hits).drop(columns=["chunk_id"]),
                hide_index=True,
                width="stretch",
                column_config={
                    "document": st.column_config.TextColumn(width="medium"),
                    "score": st.column_config.NumberColumn(format="%.3f"),
                    "bm25": st.column_config.NumberColumn(format="%.2f"),
                },
            )
        else:
            st.caption("Nothing: no chunk passes the threshold (or matches the keywords).")

    st.markdown(f"**Every chunk, best first** · {passing} pass")
    st.dataframe(
        df[[*TABLE_COLUMNS, "returned"]],
        hide_index=True,
        width="stretch",
        height=360,
        column_config={
            "document": st.column_config.TextColumn(width="medium"),
            "score": st.column_config.ProgressColumn(
                min_value=0.0, max_value=1.0, format="%.3f", width="small"
            ),
            "passes": st.column_config.CheckboxColumn(help=f"score ≥ {threshold:.2f}"),
            "bm25": st.column_config.NumberColumn(format="%.2f", help="FTS5 BM25 (when it matched)"),
            "excerpt": st.column_config.TextColumn(width="large"),
            "returned": st.column_config.CheckboxColumn(
                "in search()", help=f"returned by {mode} search, top {top_k}"
            ),
        },
    )
else:
    st.caption("Type a query to see the score of every chunk.")

# ---- chunking lab
st.divider()
st.subheader("Chunking lab", anchor=False)
st.caption(
    "Try other passage sizes on one document: see how it would split, then re-index it with "
    "the new settings."
)
by_id = {d["id"]: d for d in documents}
doc_id = st.selectbox(
    "Document",
    list(by_id),
    format_func=lambda i: f"{by_id[i]['name']} ({by_id[i]['chunk_count']} chunks)",
    key="lab_document",
)
doc = by_id[doc_id]
lab = st.columns([1, 1, 2], vertical_alignment="bottom")
target = int(lab[0].number_input(
    "TARGET (characters)", min_value=100, max_value=20_000, step=100,
    value=int(doc["chunk_target"] or settings.chunk_target), key=f"lab-target-{doc_id}",
))
overlap = int(lab[1].number_input(
    "OVERLAP (characters)", min_value=0, max_value=10_000, step=50,
    value=int(doc["chunk_overlap"] if doc["chunk_overlap"] is not None else settings.chunk_overlap),
    key=f"lab-overlap-{doc_id}",
))
lab_preview = ws.chunk_preview(doc_id, target=target, overlap=overlap)
used_overlap = lab_preview.overlap
lab[2].caption(
    f"Now indexed with TARGET {doc['chunk_target']}, OVERLAP {doc['chunk_overlap']}."
    + (f" An overlap above half the target is clamped to {used_overlap}." if used_overlap != overlap
       else "")
)

chunks = lab_preview.chunks
stats = lab_preview.stats
m = st.columns(4)
m[0].metric("Chunks", stats["count"], delta=stats["count"] - doc["chunk_count"] or None,
            delta_color="off")
m[1].metric("Mean length", f"{stats['mean_len']:.0f}")
m[2].metric("Shortest – longest", f"{stats['min_len']} – {stats['max_len']}")
m[3].metric("Mean overlap", f"{stats['mean_overlap']:.0f}")

preview = pd.DataFrame(
    [
        {
            "chunk": c.idx,
            "pages": fmt.page_label(c.page_start, c.page_end).split(" ", 1)[-1],
            "start": c.start,
            "end": c.end,
            "length": len(c.text),
            "overlap": max(0, chunks[c.idx - 1].end - c.start) if c.idx else 0,
            "text": make_excerpt(c.text, 160),
        }
        for c in chunks
    ]
)
dist_col, table_col = st.columns([2, 3], gap="large")
with dist_col:
    st.markdown("**Chunk lengths**")
    if len(preview):
        st.altair_chart(
            alt.Chart(preview)
            .mark_bar(color="#2f7d6d")
            .encode(
                x=alt.X("length:Q", bin=alt.Bin(maxbins=20), title="Characters"),
                y=alt.Y("count():Q", title="Chunks", axis=alt.Axis(tickMinStep=1, format="d")),
            )
            .properties(height=200),
            width="stretch",
        )
with table_col:
    st.markdown("**Preview**")
    st.dataframe(preview, hide_index=True, width="stretch", height="auto",
                 column_config={"text": st.column_config.TextColumn(width="large")})

unchanged = lab_preview.unchanged
if st.button(
    f"Re-index {fmt.escape_inline(doc['name'], 60)} with TARGET {target}, OVERLAP {used_overlap}",
    type="primary",
    icon=":material/sync:",
    disabled=unchanged,
    key="lab_reindex",
    help="Already indexed with these settings" if unchanged else None,
):
    outcome = watch(f"{doc['name']} (re-indexing)",
                    ws.reindex(doc_id, target=target, overlap=used_overlap), doc["name"])
    if outcome.state == "indexed":
        state["lab_flash"] = f"{doc['name']} was re-indexed into {outcome.chunks} chunks."
        st.rerun()

if flash := state.pop("lab_flash", None):
    st.success(fmt.escape_inline(flash), icon=":material/check_circle:")
