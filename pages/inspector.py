"""Retrieval Inspector: why each passage ranked for a question, the settings Chat retrieves with
("Apply to Chat"), and the retrieval lab: question sets, evaluation, sweeps, saved
configurations and A/B comparison, passage size. Layout only: the controls and each section
live in marginalia_app.inspector, the work in the Workspace's RetrievalLab."""

from __future__ import annotations

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.inspector import chunking, compare, controls, evaluate, ranking, sets
from marginalia_app.inspector.common import keep, remember
from marginalia_app.shell import DOCUMENTS_PAGE, page

SECTIONS = {
    "Why passages rank": ranking.show,
    "Question sets": sets.show,
    "Evaluate and tune": evaluate.show,
    "Compare": compare.show,
    "Passage size": chunking.show,
}

ws = page()
st.title("Retrieval Inspector", anchor=False)
st.caption(
    "Why each passage ranks for a question, the settings Chat searches with, and a lab to "
    "measure them on questions you check."
)
if not ws.documents():
    st.info("There is nothing to inspect yet: add documents first.", icon=":material/info:")
    st.page_link(DOCUMENTS_PAGE, label="Go to Documents", icon=":material/library_books:")
    st.stop()
if (mismatch := ws.mismatch()) is not None:
    st.warning(fmt.escape_inline(mismatch.message), icon=":material/sync_problem:")

current = controls.draw(ws)
first = next(iter(SECTIONS))
section = st.segmented_control(
    "Show", list(SECTIONS), key=keep("inspector_section", first), required=True,
    label_visibility="collapsed",
) or first
remember()
SECTIONS[section](ws, current)
