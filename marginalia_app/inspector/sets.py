"""Question sets: add the question asked above with the passages ticked as answering it, list,
import, export and delete sets."""

from __future__ import annotations

import hashlib

import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.inspector import answers
from marginalia_app.inspector.common import Controls, run_guarded
from marginalia_app.inspector.tables import Column, show_table
from marginalia_core.errors import MarginaliaError
from marginalia_core.lab import RetrievalLab
from marginalia_core.workspace import Workspace

TICK_CANDIDATES = 8  # passages offered for ticking, at least
SET_COLUMNS = (Column("set", "set"), Column("questions", "questions", numeric=True, fmt="d"),
               Column("judgments", "judged passages", numeric=True, fmt="d"),
               Column("about", "about"))
TICK_WORDS = 24  # words of a passage its checkbox shows; the rest opens below it


def save_question(lab: RetrievalLab, question: str, ticked: list[int], digest: str) -> None:
    """The Save button's callback: append the question, then untick its passages (a second
    click would save it twice)."""
    state = st.session_state
    name = (state.get("inspector_new_set") or "").strip() or "My questions"
    try:
        summary = lab.add_question(name, question, ticked)
    except MarginaliaError as exc:
        state["inspector_save_error"] = exc.message
        return
    for chunk_id in ticked:
        state[f"tick-{digest}-{chunk_id}"] = False
    state["inspector_set"] = state["_kept_inspector_set"] = summary.name
    state["inspector_saved"] = f"Saved. {summary.name} has {fmt.plural(summary.questions, 'question')}."


def show(ws: Workspace, c: Controls) -> None:
    lab = c.lab
    st.markdown("**Add a question to a set**",
                help="Run a question above, tick the passages that answer it, save. The "
                "judgment keeps the document and the text span, so it outlives re-indexing.")
    if not c.q:
        st.caption("Type a question above first.")
    else:
        _tick_and_save(lab, c)
    st.divider()
    summaries = lab.list_sets()
    st.markdown("**Question sets**")
    if summaries:
        show_table([{"set": s.name, "questions": s.questions, "judgments": s.judgments,
                     "about": s.description} for s in summaries], SET_COLUMNS)
    else:
        st.caption("None yet: add a question above or import a set.")
    if summaries:
        answers.editor(lab, [s.name for s in summaries])
    imp, exp = st.columns(2, gap="large")
    with imp:
        _import(lab)
    with exp:
        st.markdown("**Export or delete**")
        if summaries:
            _export(lab, [s.name for s in summaries])


def _tick_and_save(lab: RetrievalLab, c: Controls) -> None:
    state = st.session_state
    q = c.q
    hits = lab.search(q, k=max(c.top_k, TICK_CANDIDATES), threshold=-1.0, mode=c.mode,
                      alpha=c.alpha, reranker=c.config.reranker)
    digest = hashlib.blake2b(q.encode(), digest_size=6).hexdigest()
    st.caption(f"Passages for “{fmt.escape_inline(q, 120)}”, best first: tick the ones "
               "that answer it.")
    ticked = []
    terms = lab.query_terms(q)
    for h in hits:
        pages = fmt.page_label(h.page_start, h.page_end, h.mime, h.location)
        words = h.content.split()
        first = " ".join(words[:TICK_WORDS]) + ("…" if len(words) > TICK_WORDS else "")
        label = (f"{fmt.escape_inline(h.document_name, 50)}"
                 f"{' · ' + pages if pages else ''} — {fmt.escape_inline(first)}")
        with st.container(key=f"tick-row-{h.chunk_id}", gap=None):
            if st.checkbox(label, key=f"tick-{digest}-{h.chunk_id}"):
                ticked.append(h.chunk_id)
            st.html('<details class="lab-whole"><summary>Read the whole passage</summary>'
                    f"{margin.terms_html(h.content, h.mime, terms)}</details>")
    names = [s.name for s in lab.list_sets()]
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    c1.text_input("Question set", key="inspector_new_set",
                  value=state.get("inspector_set") or (names[0] if names else "My questions"),
                  help="An existing set gets the question appended; a new name creates the set.")
    c2.button("Save question", icon=":material/add_task:", key="inspector_save_q",
              disabled=not ticked, help=None if ticked else "Tick a passage first",
              on_click=save_question, args=(lab, q, ticked, digest))
    if saved := state.pop("inspector_saved", None):
        st.success(fmt.escape_inline(saved), icon=":material/check_circle:")
    if failed := state.pop("inspector_save_error", None):
        st.error(fmt.escape_inline(failed), icon=":material/error:")


def _import(lab: RetrievalLab) -> None:
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
            st.success(f"Imported {fmt.plural(summary.questions, 'question')} into "
                       f"{fmt.escape_inline(summary.name)}.", icon=":material/check_circle:")


def _export(lab: RetrievalLab, names: list[str]) -> None:
    ename = st.selectbox("Set", names, key="inspector_export_set")
    fmt_name = st.radio("Format", ["jsonl", "csv"], horizontal=True,
                        key="inspector_export_fmt",
                        help="JSON lines keeps text spans; CSV keeps pages")
    st.download_button("Download", lab.export_set(ename, fmt_name),
                       file_name=f"{ename}.{fmt_name}", icon=":material/download:",
                       key="inspector_export")
    if st.button("Delete this set", key="inspector_delete_set", icon=":material/delete:"):
        lab.delete_set(ename)
        st.rerun()
