"""The question and the retrieval settings at the top of the Inspector, "Apply to Chat", and
the line saying what Chat uses. ``draw`` returns them as one frozen ``Controls``."""

from __future__ import annotations

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.inspector.common import (
    MODE_HELP,
    MODE_LABELS,
    RERANK_HELP,
    RERANK_LABELS,
    Controls,
    config_label,
    keep,
    load_into_controls,
    remember,
    run_guarded,
)
from marginalia_app.shell import retrieval_lab
from marginalia_core.config import RETRIEVAL_MODES
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.workspace import Workspace


def draw(ws: Workspace) -> Controls:
    lab = retrieval_lab(ws)
    settings = ws.settings
    embedder = ws.embedder
    applied = lab.applied()
    resolved = lab.resolved(applied)
    chat_threshold = float(resolved.threshold or 0.0)
    query = st.text_input(
        "Question", key=keep("inspector_query", ""),
        placeholder="Type a question, e.g. “What did Fermat write in the margin?”",
    )
    st.markdown("**Retrieval settings**", help="What Chat searches with once you apply them. "
                "Environment variables (MARGINALIA_THRESHOLD, _TOP_K, _RETRIEVAL, "
                "_CHUNK_TARGET, _CHUNK_OVERLAP) stay the defaults underneath.")
    cols = st.columns([3, 6, 2], gap="medium", vertical_alignment="bottom")
    cols += st.columns([3, 2, 2, 4, 3], gap="medium", vertical_alignment="bottom")
    with cols[0]:
        threshold = st.slider(
            "Relevance threshold", min_value=0.0, max_value=1.0, step=0.01,
            key=keep("inspector_threshold", chat_threshold),
            help=f"Cosine similarity a passage needs to be used (threshold). {embedder.model}'s "
            f"default is {embedder.default_threshold:.2f}; Chat uses {chat_threshold:.2f}.",
        )
    with cols[1]:
        mode = st.segmented_control(
            "Search method", list(RETRIEVAL_MODES), key=keep("inspector_mode", applied.mode),
            required=True, format_func=lambda m: MODE_LABELS[m], help=MODE_HELP,
        ) or applied.mode
    with cols[2]:
        top_k = int(st.number_input(
            "Passages returned", min_value=1, max_value=50,
            key=keep("inspector_k", applied.top_k),
            help="How many passages an answer is given (top-k).",
        ))
    with cols[3]:
        keyword = st.slider(
            "Keyword weight", min_value=0.0, max_value=1.0, step=0.05,
            key=keep("inspector_keyword", round(lab.keyword_weight(applied), 2)),
            disabled=mode != "hybrid",
            help="How much keyword (BM25) matches count against meaning in Meaning + keywords: "
            "1 − the fusion weight α. Moving it re-ranks without embedding again.",
        )
    with cols[4]:
        target = int(st.number_input(
            "Passage size", min_value=100, max_value=20_000, step=100,
            key=keep("inspector_target", int(applied.chunk_target or settings.retrieval.chunk_target)),
            help="Characters per passage when documents are split (chunk TARGET).",
        ))
    with cols[5]:
        overlap = int(st.number_input(
            "Overlap", min_value=0, max_value=10_000, step=50,
            key=keep("inspector_overlap",
                     int(applied.chunk_overlap if applied.chunk_overlap is not None
                         else settings.retrieval.chunk_overlap)),
            help="Characters shared by neighbouring passages (chunk OVERLAP).",
        ))
    with cols[6]:
        names = lab.rerankers()
        reranker = st.selectbox(
            "Rerank", names, key=keep("inspector_rerank", applied.reranker),
            format_func=lambda n: RERANK_LABELS.get(n, n), help=RERANK_HELP,
        ) or applied.reranker
    remember()
    alpha = round(1.0 - keyword, 4)
    config = ev.EvalConfig(mode=mode, threshold=float(threshold), top_k=top_k,
                           alpha=alpha if mode == "hybrid" else applied.alpha,
                           chunk_target=target, chunk_overlap=overlap, reranker=reranker,
                           embedder=lab.embedder_key())
    controls = Controls(query, config, applied, chat_threshold, lab)
    _apply_button(ws, controls, cols[7])
    _configurations(ws, controls)
    return controls


def _apply(c: Controls, what: str) -> None:
    outcome = None
    for event in run_guarded(c.lab.apply, c.config) or []:
        if event["type"] == "done":
            outcome = event
        elif event["type"] == "error":
            st.error(fmt.escape_inline(event["message"]), icon=":material/error:")
    st.session_state["inspector_flash"] = f"Chat now uses {what}." + (
        " Documents were re-indexed with the new passage size." if outcome else "")
    st.rerun()


def _apply_button(ws: Workspace, c: Controls, where) -> None:
    state = st.session_state
    if note := state.pop("inspector_apply_now", None):
        _apply(c, note)
    same = c.lab.same_effect(c.config, c.applied)
    if where.button("Apply to Chat", type="primary", icon=":material/done_all:",
                    key="inspector_apply", disabled=same,
                    help="Chat uses these settings already" if same else
                    "Save these settings for this library; documents split another way are "
                    "re-indexed."):
        _apply(c, "these settings")


def _configurations(ws: Workspace, c: Controls) -> None:
    """What Chat uses (and which saved configuration that is); Load a saved configuration
    into the controls; Reset them to the defaults."""
    state, lab = st.session_state, c.lab
    tuning = ws.retrieval_tuning()
    same = lab.same_effect(c.config, c.applied)
    named = f" (saved configuration “{fmt.escape_inline(tuning.config)}”)" if tuning.config \
        else ""
    status = ("Chat uses these settings" if same else
              "Chat uses: " + config_label(lab, c.applied))
    status += named + ("" if tuning.tuned else " (the defaults)") + "."
    saved = lab.configs()
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    row.caption(status, width="stretch")
    if saved:
        names = list(saved)
        if state.get("inspector_load_name") not in names:
            state["inspector_load_name"] = names[0]
        name = row.selectbox("Saved configuration", names, key="inspector_load_name",
                             label_visibility="collapsed", width=200)
        row.button("Load", key="inspector_load", icon=":material/bookmark:",
                   help="Put this saved configuration into the settings above",
                   on_click=load_into_controls,
                   args=(lab, saved[name], f"Loaded “{name}” into the settings."))
    at_defaults = lab.same_effect(c.config, lab.defaults())
    row.button("Reset to defaults", key="inspector_reset", icon=":material/restart_alt:",
               disabled=at_defaults,
               help="The settings above are the defaults" if at_defaults else
               "Put the defaults (environment and built-in) into the settings above",
               on_click=load_into_controls,
               args=(lab, lab.defaults(), "The settings are the defaults again."))
    for key in ("inspector_flash", "inspector_loaded"):
        if flash := state.pop(key, None):
            st.success(fmt.escape_inline(flash), icon=":material/check_circle:")
