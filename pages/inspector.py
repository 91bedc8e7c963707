"""Retrieval Inspector: why each passage ranked for a question, the settings Chat retrieves with
("Apply to Chat"), and the retrieval lab: question sets, evaluation, sweeps, saved
configurations and A/B comparison, passage size. Layout only; the work is Workspace.lab's."""

from __future__ import annotations

import hashlib
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.charts import histogram, sweep_chart, weight_chart
from marginalia_app.ingest_view import watch
from marginalia_app.shell import DOCUMENTS_PAGE, page
from marginalia_core.config import RETRIEVAL_MODES
from marginalia_core.errors import MarginaliaError
from marginalia_core.ingest.chunking import effective_overlap
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.retriever import make_excerpt
from marginalia_core.workspace import Workspace

ws = page()
settings = ws.settings
state = st.session_state
lab = ws.lab

MODE_LABELS = {"hybrid": "Meaning + keywords", "dense": "Meaning only", "lexical": "Keywords only"}
MODE_HELP = (
    "**Meaning + keywords** (hybrid): the cosine-similarity and BM25 rankings fused. "
    "**Meaning only** (dense): cosine similarity of the embeddings. "
    "**Keywords only** (lexical): BM25 keyword matches, with a relevance floor of its own."
)
SECTIONS = ("Why passages rank", "Question sets", "Evaluate and tune", "Compare", "Passage size")
# Widget values kept across page switches: Streamlit drops a widget's state when its page is
# not shown, so each is mirrored in a plain session key and restored on return.
KEPT = ("inspector_query", "inspector_threshold", "inspector_mode", "inspector_k",
        "inspector_keyword", "inspector_target", "inspector_overlap", "inspector_section",
        "inspector_set", "inspector_docs", "inspector_cfg_a", "inspector_cfg_b")
METRIC_HELP = {
    "recall": "Share of the relevant passages found in the passages returned (recall@k).",
    "precision": "Share of the passages returned that are relevant (precision@k).",
    "mrr": "1 / the rank of the first relevant passage, averaged (MRR@k).",
    "ndcg@10": "Ranking quality of the first 10, 1.0 = every relevant passage on top "
    "(nDCG@10).",
    "hit@1": "Share of questions whose first passage is relevant (hit@1).",
}


def keep(key: str, default: Any) -> str:
    """``key`` for a widget whose value survives navigating to another page and back."""
    if key not in state:
        state[key] = state.get(f"_kept_{key}", default)
    return key


def remember() -> None:
    for key in KEPT:
        if key in state:
            state[f"_kept_{key}"] = state[key]


@st.cache_data(max_entries=64, show_spinner=False)
def score_rows(query: str, generation: int, embedder_key: str, _ws: Workspace) -> list[dict]:
    """Every chunk's cosine for ``query`` (the histogram); recomputed when documents change."""
    return _ws.score_table(query)


def metric_row(metrics: dict[str, float], k: int, other: dict[str, float] | None = None) -> None:
    names = [(f"recall@{k}", "Found", "recall"), (f"precision@{k}", "Precision", "precision"),
             (f"mrr@{k}", "First relevant (MRR)", "mrr"), ("ndcg@10", "Ranking (nDCG@10)",
                                                           "ndcg@10"),
             ("hit@1", "Right on top", "hit@1")]
    cols = st.columns(len(names))
    for col, (key, label, help_key) in zip(cols, names, strict=True):
        value = metrics.get(key, 0.0)
        delta = None if other is None else f"{value - other.get(key, 0.0):+.3f}"
        col.metric(label, f"{value:.3f}", delta=delta, help=METRIC_HELP[help_key])


def question_table(result: ev.EvalResult) -> pd.DataFrame:
    return pd.DataFrame([
        {"question": q.question, "first relevant at": q.first_relevant_rank,
         "found": f"{len(q.found)} of {len(q.found) + len(q.missed)}",
         "missed": "; ".join(q.missed),
         "recall": round(q.recall, 3),
         "precision": None if q.precision is None else round(q.precision, 3)}
        for q in result.questions
    ])


def config_label(c: ev.EvalConfig) -> str:
    t = f"{default_threshold:.2f}" if c.threshold is None else f"{c.threshold:.2f}"
    kw = "" if c.mode != "hybrid" else (
        f" · keyword weight {1 - (lexical.ALPHA if c.alpha is None else c.alpha):.2f}")
    size = "" if c.chunk_target is None else f" · passages {c.chunk_target}/{c.chunk_overlap}"
    return f"{MODE_LABELS.get(c.mode, c.mode)} · threshold {t} · {c.top_k} returned{kw}{size}"


def run_guarded(fn, *args, **kwargs):
    """Call a lab operation; a MarginaliaError / ValueError becomes a clear message."""
    try:
        return fn(*args, **kwargs)
    except ev.Cancelled:
        st.info("Cancelled; nothing was kept.", icon=":material/cancel:")
    except (MarginaliaError, ValueError) as exc:
        st.error(fmt.escape_inline(getattr(exc, "message", None) or str(exc)),
                 icon=":material/error:")
    return None


def progress_callback(bar):
    def report(event: dict[str, Any]) -> None:
        total = max(1, int(event.get("total") or 1))
        done = int(event.get("done") or 0)
        what = "Searching" if event.get("stage") == "search" else "Embedding passages"
        extra = f" (passage size {event['target']})" if "target" in event else ""
        bar.progress(min(1.0, done / total), text=f"{what}{extra}: {done} of {total}")
    return report


st.title("Retrieval Inspector", anchor=False)
st.caption(
    "Why each passage ranks for a question, the settings Chat searches with, and a lab to "
    "measure them on questions you check."
)

documents = ws.documents()
if not documents:
    st.info("There is nothing to inspect yet: add documents first.", icon=":material/info:")
    st.page_link(DOCUMENTS_PAGE, label="Go to Documents", icon=":material/library_books:")
    st.stop()

embedder = ws.embedder
default_threshold = float(ws.retriever.threshold)
applied = lab.applied()
mismatch = ws.mismatch()
if mismatch is not None:
    st.warning(fmt.escape_inline(mismatch.message), icon=":material/sync_problem:")

# ---- question and settings
query = st.text_input(
    "Question", key=keep("inspector_query", ""),
    placeholder="Type a question, e.g. “What did Fermat write in the margin?”",
)
st.markdown("**Retrieval settings**", help="What Chat searches with once you apply them. "
            "Environment variables (MARGINALIA_THRESHOLD, _TOP_K, _RETRIEVAL, _CHUNK_TARGET, "
            "_CHUNK_OVERLAP) stay the defaults underneath.")
controls = st.columns([3, 6, 2], gap="medium", vertical_alignment="bottom")
controls += st.columns([4, 2, 2, 4], gap="medium", vertical_alignment="bottom")
with controls[0]:
    threshold = st.slider(
        "Relevance threshold", min_value=0.0, max_value=1.0, step=0.01,
        key=keep("inspector_threshold", default_threshold),
        help=f"Cosine similarity a passage needs to be used (threshold). {embedder.model}'s "
        f"default is {embedder.default_threshold:.2f}; Chat uses {default_threshold:.2f}.",
    )
with controls[1]:
    mode = st.segmented_control(
        "Search method", list(RETRIEVAL_MODES), key=keep("inspector_mode", applied.mode),
        required=True, format_func=lambda m: MODE_LABELS[m], help=MODE_HELP,
    ) or applied.mode
with controls[2]:
    top_k = int(st.number_input(
        "Passages returned", min_value=1, max_value=50, key=keep("inspector_k", applied.top_k),
        help="How many passages an answer is given (top-k).",
    ))
with controls[3]:
    keyword = st.slider(
        "Keyword weight", min_value=0.0, max_value=1.0, step=0.05,
        key=keep("inspector_keyword",
                 round(1 - (lexical.ALPHA if applied.alpha is None else applied.alpha), 2)),
        disabled=mode != "hybrid",
        help="How much keyword (BM25) matches count against meaning in Meaning + keywords: "
        "1 − the fusion weight α. Moving it re-ranks without embedding again.",
    )
alpha = round(1.0 - keyword, 4)
with controls[4]:
    target = int(st.number_input(
        "Passage size", min_value=100, max_value=20_000, step=100,
        key=keep("inspector_target", int(applied.chunk_target or settings.chunk_target)),
        help="Characters per passage when documents are split (chunk TARGET).",
    ))
with controls[5]:
    overlap = int(st.number_input(
        "Overlap", min_value=0, max_value=10_000, step=50,
        key=keep("inspector_overlap", int(applied.chunk_overlap or settings.chunk_overlap)),
        help="Characters shared by neighbouring passages (chunk OVERLAP).",
    ))
remember()

current = ev.EvalConfig(mode=mode, threshold=float(threshold), top_k=top_k,
                        alpha=alpha if mode == "hybrid" else applied.alpha,
                        chunk_target=target, chunk_overlap=overlap, embedder=ws.lab.embedder_key())


def effective(c: ev.EvalConfig) -> tuple:
    """What a configuration does (None = the default spelled out), to tell if Chat uses it."""
    t = c.chunk_target or settings.chunk_target
    o = settings.chunk_overlap if c.chunk_overlap is None else c.chunk_overlap
    return (c.mode, round(default_threshold if c.threshold is None else c.threshold, 4),
            c.top_k, round(lexical.ALPHA if c.alpha is None else c.alpha, 4) if c.mode ==
            "hybrid" else None, t, effective_overlap(t, o))


same_as_chat = effective(current) == effective(applied)
apply_col, status_col = controls[6], st.container()
if apply_col.button("Apply to Chat", type="primary", icon=":material/done_all:",
                    key="inspector_apply", disabled=same_as_chat,
                    help="Chat uses these settings already" if same_as_chat else
                    "Save these settings for this library; documents split another way are "
                    "re-indexed."):
    outcome = None
    for event in run_guarded(lab.apply, current) or []:
        if event["type"] == "done":
            outcome = event
        elif event["type"] == "error":
            st.error(fmt.escape_inline(event["message"]), icon=":material/error:")
    state["inspector_flash"] = "Chat now uses these settings." + (
        " Documents were re-indexed with the new passage size." if outcome else "")
    st.rerun()
status_col.caption(
    ("Chat uses these settings" if same_as_chat else "Chat uses: " + config_label(applied))
    + ("" if ws.applied_settings() else " (the defaults)") + "."
)
if flash := state.pop("inspector_flash", None):
    st.success(fmt.escape_inline(flash), icon=":material/check_circle:")

section = st.segmented_control(
    "Show", SECTIONS, key=keep("inspector_section", SECTIONS[0]), required=True,
    label_visibility="collapsed",
) or SECTIONS[0]
remember()
generation = ws.store.generation()
q = query.strip()


# ---- why passages rank
def show_ranking() -> None:
    if not q:
        st.caption("Type a question to see how every passage scores.")
        return
    rows = score_rows(q, generation, ws.lab.embedder_key(), ws)
    df = pd.DataFrame(rows)
    df["passes"] = df["score"] >= threshold
    hits = lab.search(q, k=top_k, threshold=threshold, mode=mode, alpha=alpha)
    returned = {h.chunk_id: h.rank for h in hits}
    explained = lab.explain(q, threshold=threshold, alpha=alpha)

    m = st.columns(4)
    m[0].metric("Passages passing", f"{int(df['passes'].sum())} of {len(df)}",
                help=f"Passages whose cosine passes the relevance threshold (≥ {threshold:.2f})")
    m[1].metric("Best relevance", f"{df['score'].max():.3f}" if len(df) else "–",
                help="Highest cosine similarity")
    m[2].metric(f"{MODE_LABELS[mode]} returns", len(hits), help=f"at most {top_k} passages")
    m[3].metric("Threshold", f"{threshold:.2f}",
                delta=None if abs(threshold - default_threshold) < 1e-9
                else f"{threshold - default_threshold:+.2f} vs Chat", delta_color="off")

    names = sorted({r.document_name for r in explained})
    chosen = st.multiselect("Documents", names, key=keep("inspector_docs", []),
                            placeholder="All documents", help="Show only these documents")
    remember()
    order_key = {"hybrid": "fused_rank", "dense": "dense_rank", "lexical": "lexical_rank"}[mode]
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
         "excerpt": make_excerpt(r.content, 160),
         "chunk_id": r.chunk_id}
        for r in shown
    ], columns=["returned", "document", "page", "hybrid score", "hybrid rank", "cosine",
                "meaning rank", "bm25", "keyword rank", "passes", "excerpt", "chunk_id"])

    order_label = {"hybrid": "the hybrid score", "dense": "the meaning rank",
                   "lexical": "the keyword rank"}[mode]
    used = ""
    if mode == "hybrid":
        used = f" · keyword weight for this question {1 - lab.query_alpha(q, alpha):.2f}"
    st.markdown(f"**Why each passage ranked** · {MODE_LABELS[mode]}{used}",
                help=f"The {len(explained)} passages the meaning or keyword search proposed, "
                f"ordered by {order_label}. Select a row to read the whole passage."
                + (" The keyword weight you set is adapted to each question: the list whose "
                   "best passages stand out more clearly from the rest counts for more."
                   if mode == "hybrid" else ""))
    picked = st.dataframe(
        table.drop(columns=["chunk_id"]), hide_index=True, width="stretch", height=360,
        on_select="rerun", selection_mode="single-row", key="inspector_table",
        column_config={
            "returned": st.column_config.TextColumn(
                "returned", width=70, alignment="right", help=f"Rank among the passages {MODE_LABELS[mode]} "
                f"returns (top {top_k}); empty = not returned"),
            "document": st.column_config.TextColumn(width=175),
            "page": st.column_config.TextColumn(width=45),
            "hybrid score": st.column_config.NumberColumn(
                "hybrid", format="%.4f", width=65,
                help="The fused score the hybrid order is sorted by"),
            "hybrid rank": st.column_config.NumberColumn("rank", width=40, help="Hybrid rank"),
            "cosine": st.column_config.ProgressColumn(
                "meaning", min_value=0.0, max_value=1.0, format="%.3f", width=85,
                help="Cosine similarity of the question and the passage"),
            "meaning rank": st.column_config.NumberColumn("rank", width=40,
                                                          help="Rank by meaning (cosine)"),
            "bm25": st.column_config.TextColumn(
                "keywords", width=70, alignment="right",
                help="BM25 keyword score (empty: no word of the question matched)"),
            "keyword rank": st.column_config.TextColumn(
                "rank", width=40, alignment="right", help="Rank by keywords (BM25)"),
            "passes": st.column_config.CheckboxColumn(
                width=55, help=f"cosine ≥ {threshold:.2f}, or holds every keyword"),
            "excerpt": st.column_config.TextColumn(width=90),
        },
    )
    if not len(table):
        st.caption("No passage of the chosen documents was proposed.")
        return
    selected = picked.selection.rows or [0]
    row = shown[selected[0]]
    terms = lexical.query_terms(q)
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
        st.markdown(fmt.passage_markdown(row.content, fmt.term_spans(row.content, terms)))


# ---- question sets
def set_names() -> list[str]:
    return [s.name for s in lab.list_sets()]


def save_question(question: str, ticked: list[int], digest: str) -> None:
    """The Save button's callback: append the question, then untick its passages (a second
    click would save it twice)."""
    name = (state.get("inspector_new_set") or "").strip() or "My questions"
    try:
        summary = lab.add_question(name, question, ticked)
    except MarginaliaError as exc:
        state["inspector_save_error"] = exc.message
        return
    for chunk_id in ticked:
        state[f"tick-{digest}-{chunk_id}"] = False
    state["inspector_set"] = state["_kept_inspector_set"] = summary.name
    state["inspector_saved"] = f"Saved. {summary.name} has {summary.questions} question(s)."


def show_sets() -> None:
    st.markdown("**Add a question to a set**",
                help="Run a question above, tick the passages that answer it, save. The "
                "judgment keeps the document and the text span, so it outlives re-indexing.")
    if not q:
        st.caption("Type a question above first.")
    else:
        hits = lab.search(q, k=max(top_k, 8), threshold=-1.0, mode=mode, alpha=alpha)
        digest = hashlib.blake2b(q.encode(), digest_size=6).hexdigest()
        st.caption(f"Passages for “{fmt.escape_inline(q, 120)}”, best first: tick the ones "
                   "that answer it.")
        ticked = []
        for h in hits:
            pages = fmt.page_label(h.page_start, h.page_end, h.mime, h.location)
            label = (f"{fmt.escape_inline(h.document_name, 50)}"
                     f"{' · ' + pages if pages else ''} — "
                     f"{fmt.escape_inline(make_excerpt(h.content, 150))}")
            if st.checkbox(label, key=f"tick-{digest}-{h.chunk_id}"):
                ticked.append(h.chunk_id)
        names = set_names()
        c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
        c1.text_input("Question set", key="inspector_new_set",
                             value=state.get("inspector_set") or (names[0] if names else
                                                                   "My questions"),
                             help="An existing set gets the question appended; a new name "
                             "creates the set.")
        c2.button("Save question", icon=":material/add_task:", key="inspector_save_q",
                  disabled=not ticked, help=None if ticked else "Tick a passage first",
                  on_click=save_question, args=(q, ticked, digest))
        if saved := state.pop("inspector_saved", None):
            st.success(fmt.escape_inline(saved), icon=":material/check_circle:")
        if failed := state.pop("inspector_save_error", None):
            st.error(fmt.escape_inline(failed), icon=":material/error:")

    st.divider()
    summaries = lab.list_sets()
    st.markdown("**Question sets**")
    if summaries:
        st.dataframe(pd.DataFrame([{"set": s.name, "questions": s.questions,
                                    "judgments": s.judgments, "about": s.description}
                                   for s in summaries]),
                     hide_index=True, width="stretch",
                     column_config={"set": st.column_config.TextColumn(width=200),
                                    "about": st.column_config.TextColumn(width=360)})
    else:
        st.caption("None yet: add a question above or import a set.")
    imp, exp = st.columns(2, gap="large")
    with imp:
        st.markdown("**Import**", help="A CSV of question, document, page (empty page = the "
                    "whole document, 3-5 = a range); this page's JSON-lines export; or BEIR's "
                    "queries.jsonl together with a qrels .tsv.")
        files = st.file_uploader("Files", type=["csv", "jsonl", "tsv"],
                                 accept_multiple_files=True, key="inspector_import_files")
        iname = st.text_input("Name of the imported set", key="inspector_import_name")
        if st.button("Import", key="inspector_import", disabled=not files):
            summary = run_guarded(lab.import_upload, {f.name: f.getvalue() for f in files},
                                  name=iname)
            if summary is not None:
                st.success(f"Imported {summary.questions} question(s) into "
                           f"{fmt.escape_inline(summary.name)}.", icon=":material/check_circle:")
    with exp:
        st.markdown("**Export or delete**")
        if summaries:
            ename = st.selectbox("Set", [s.name for s in summaries], key="inspector_export_set")
            fmt_name = st.radio("Format", ["jsonl", "csv"], horizontal=True,
                                key="inspector_export_fmt",
                                help="JSON lines keeps text spans; CSV keeps pages")
            st.download_button("Download", lab.export_set(ename, fmt_name),
                               file_name=f"{ename}.{fmt_name}", icon=":material/download:",
                               key="inspector_export")
            if st.button("Delete this set", key="inspector_delete_set",
                         icon=":material/delete:"):
                lab.delete_set(ename)
                st.rerun()


# ---- evaluate and tune
def pick_set() -> str | None:
    names = set_names()
    if not names:
        st.info("Make or import a question set first (Question sets).", icon=":material/info:")
        return None
    if state.get("inspector_set") not in names:
        state["inspector_set"] = names[0]
    name = st.selectbox("Question set", names, key="inspector_set")
    remember()
    return name


def show_evaluate() -> None:
    name = pick_set()
    if name is None:
        return
    st.caption("With the settings above: " + config_label(current))
    b = st.columns(5)
    bar = st.empty()
    if b[0].button("Evaluate", type="primary", key="inspector_evaluate",
                   icon=":material/analytics:"):
        result = run_guarded(lab.evaluate, name, current, progress=progress_callback(bar))
        if result is not None:
            state["inspector_result"] = result
    if b[1].button("Sweep the threshold", key="inspector_sweep_t",
                   icon=":material/show_chart:"):
        sweep = run_guarded(lab.threshold_sweep, name, mode=mode, top_k=top_k, alpha=alpha)
        if sweep is not None:
            state["inspector_tsweep"] = sweep
    if b[2].button("Sweep the keyword weight", key="inspector_sweep_w",
                   icon=":material/balance:"):
        sweep = run_guarded(lab.weight_sweep, name, current)
        if sweep is not None:
            state["inspector_wsweep"] = sweep
    if b[3].button("Sweep passage size", key="inspector_sweep_c", icon=":material/view_week:",
                   help="Re-split and re-embed every document into a scratch index for each "
                   "size (800/100, 1400/200, 2000/300); embeddings are cached, so a second "
                   "sweep is fast. Any click (Cancel) stops it."):
        b[4].button("Cancel", key="inspector_cancel", icon=":material/cancel:")
        sweep = run_guarded(lab.chunk_sweep, name, config=current,
                            progress=progress_callback(bar))
        if sweep is not None:
            state["inspector_csweep"] = sweep
    bar.empty()

    result: ev.EvalResult | None = state.get("inspector_result")
    if result is not None and result.set_name == name:
        st.markdown(f"**{fmt.escape_inline(name)}** · {config_label(result.config)}")
        metric_row(result.metrics, result.config.top_k)
        st.dataframe(question_table(result), hide_index=True, width="stretch",
                     key="inspector_questions",
                     column_config={
                         "question": st.column_config.TextColumn(width=250),
                         "first relevant at": st.column_config.NumberColumn(
                             "rank", width=60, help="Rank of the first relevant passage "
                             f"(empty: not in the first {ev.DEPTH})"),
                         "found": st.column_config.TextColumn(
                             width=70, help="Ticked passages found in the passages returned"),
                         "missed": st.column_config.TextColumn(
                             width=250, help="Ticked passages not among those returned"),
                         "recall": st.column_config.NumberColumn(width=60),
                         "precision": st.column_config.NumberColumn(width=75),
                     })
        cname, csave = st.columns([3, 1], vertical_alignment="bottom")
        label = cname.text_input("Save these settings as", key="inspector_cfg_name",
                                 placeholder="e.g. strict")
        if csave.button("Save configuration", key="inspector_save_cfg",
                        icon=":material/bookmark_add:", disabled=not label.strip()) and \
                run_guarded(lambda: lab.save_config(label.strip(), current) or True):
            st.success(f"Saved {fmt.escape_inline(label.strip())}.",
                       icon=":material/check_circle:")

    tsweep: ev.ThresholdSweep | None = state.get("inspector_tsweep")
    if tsweep is not None:
        st.markdown(f"**Threshold sweep** · suggested {tsweep.suggested:.2f} (best F1)",
                    help="Precision and recall of the passages returned at each threshold; "
                    "F1 balances them.")
        st.altair_chart(sweep_chart(tsweep, float(threshold)), width="stretch")

        def use_suggested(value: float = tsweep.suggested) -> None:
            state["inspector_threshold"] = max(0.0, min(1.0, float(value)))

        st.button(f"Use the suggested threshold {tsweep.suggested:.2f}", on_click=use_suggested,
                  key="inspector_use_suggested")
    wsweep: ev.WeightSweep | None = state.get("inspector_wsweep")
    if wsweep is not None:
        best = lexical.ALPHA if wsweep.best is None else wsweep.best
        st.markdown(f"**Keyword weight sweep** · best {1 - best:.2f}")
        st.altair_chart(weight_chart(wsweep, "ndcg@10"), width="stretch")
    csweep = state.get("inspector_csweep")
    if csweep is not None:
        st.markdown(f"**Passage size sweep** · best {csweep.best[0]} / {csweep.best[1]}")
        st.dataframe(pd.DataFrame([
            {"passage size": p.target, "overlap": p.overlap, "passages": p.chunks,
             "embedded now": p.embedded_now, **{k: round(v, 3) for k, v in
                                                 p.result.metrics.items() if k != "questions"}}
            for p in csweep.points]), hide_index=True, width="stretch")


# ---- compare two saved configurations
def show_compare() -> None:
    name = pick_set()
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
    a = ca.selectbox("A", names, key="inspector_cfg_a", help=None)
    b = cb.selectbox("B", names, key="inspector_cfg_b")
    remember()
    ca.caption(config_label(saved[a]))
    cb.caption(config_label(saved[b]))
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
    st.dataframe(pd.DataFrame([
        {"question": d.question, "rank in A": d.rank_a, "rank in B": d.rank_b,
         "moved up": d.shift, "gained": ", ".join(d.gained), "lost": ", ".join(d.lost)}
        for d in cmp.deltas]), hide_index=True, width="stretch", key="inspector_deltas",
        column_config={"question": st.column_config.TextColumn(width=250),
                       "rank in A": st.column_config.NumberColumn(width=70),
                       "rank in B": st.column_config.NumberColumn(width=70),
                       "moved up": st.column_config.NumberColumn(
                           width=70, help="How many places B moved the first relevant "
                           "passage up"),
                       "gained": st.column_config.TextColumn(width=160),
                       "lost": st.column_config.TextColumn(width=160)})


# ---- passage size on one document
def show_chunking() -> None:
    st.caption("Try other passage sizes on one document: see how it would split, then "
               "re-index it.")
    by_id = {d["id"]: d for d in documents}
    doc_id = st.selectbox(
        "Document", list(by_id),
        format_func=lambda i: f"{by_id[i]['name']} ({by_id[i]['chunk_count']} passages)",
        key="lab_document",
    )
    doc = by_id[doc_id]
    cols = st.columns([1, 1, 2], vertical_alignment="bottom")
    d_target = int(cols[0].number_input(
        "Passage size (characters)", min_value=100, max_value=20_000, step=100,
        value=int(doc["chunk_target"] or settings.chunk_target), key=f"lab-target-{doc_id}",
        help="Chunk TARGET",
    ))
    d_overlap = int(cols[1].number_input(
        "Overlap (characters)", min_value=0, max_value=10_000, step=50,
        value=int(doc["chunk_overlap"] if doc["chunk_overlap"] is not None
                  else settings.chunk_overlap),
        key=f"lab-overlap-{doc_id}", help="Chunk OVERLAP",
    ))
    preview_ = ws.chunk_preview(doc_id, target=d_target, overlap=d_overlap)
    used_overlap = preview_.overlap
    cols[2].caption(
        f"Now split into passages of {doc['chunk_target']} characters, overlap "
        f"{doc['chunk_overlap']}."
        + (f" An overlap above half the size is clamped to {used_overlap}."
           if used_overlap != d_overlap else "")
    )
    chunks, stats = preview_.chunks, preview_.stats
    m = st.columns(4)
    m[0].metric("Passages", stats["count"], delta=stats["count"] - doc["chunk_count"] or None,
                delta_color="off")
    m[1].metric("Mean length", f"{stats['mean_len']:.0f}")
    m[2].metric("Shortest – longest", f"{stats['min_len']} – {stats['max_len']}")
    m[3].metric("Mean overlap", f"{stats['mean_overlap']:.0f}")
    preview = pd.DataFrame([
        {"chunk": c.idx,
         "pages": fmt.page_label(c.page_start, c.page_end, doc["mime"]).split(" ", 1)[-1],
         "start": c.start, "end": c.end, "length": len(c.text),
         "overlap": max(0, chunks[c.idx - 1].end - c.start) if c.idx else 0,
         "text": make_excerpt(c.text, 160)}
        for c in chunks
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
        st.dataframe(preview, hide_index=True, width="stretch", height="auto",
                     column_config={"text": st.column_config.TextColumn(width="large")})
    unchanged = preview_.unchanged
    if st.button(
        f"Re-index {fmt.escape_inline(doc['name'], 60)} with passage size {d_target}, "
        f"overlap {used_overlap}",
        type="primary", icon=":material/sync:", disabled=unchanged, key="lab_reindex",
        help="Already indexed with these settings" if unchanged else None,
    ):
        outcome = watch(f"{doc['name']} (re-indexing)",
                        ws.reindex(doc_id, target=d_target, overlap=used_overlap), doc["name"])
        if outcome.state == "indexed":
            state["lab_flash"] = f"{doc['name']} was re-indexed into {outcome.chunks} passages."
            st.rerun()
    if flash_ := state.pop("lab_flash", None):
        st.success(fmt.escape_inline(flash_), icon=":material/check_circle:")


{
    "Why passages rank": show_ranking,
    "Question sets": show_sets,
    "Evaluate and tune": show_evaluate,
    "Compare": show_compare,
    "Passage size": show_chunking,
}[section]()
