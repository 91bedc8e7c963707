"""Marginalia: chat with your documents; every answer cites the passages it came from.

Run with ``streamlit run app.py``. This file only wires the pages together: navigation, the
shared Workspace (built once per process) and the sidebar (mode and conversations).
"""

from __future__ import annotations

import logging

import streamlit as st

from marginalia_app.presentation import escape_inline
from pages.common import (
    CHAT_PAGE,
    DOCUMENTS_PAGE,
    INSPECTOR_PAGE,
    inject_css,
    mark_shell_run,
    render_sidebar,
    workspace,
)

st.set_page_config(
    page_title="Marginalia",
    page_icon="📖",
    layout="wide",
    initial_sidebar_state="expanded",
)

chat_page = st.Page(CHAT_PAGE, title="Chat", icon=":material/forum:", default=True)
pages = [
    chat_page,
    st.Page(DOCUMENTS_PAGE, title="Documents", icon=":material/library_books:"),
    st.Page(INSPECTOR_PAGE, title="Retrieval Inspector", icon=":material/troubleshoot:"),
]
current = st.navigation(pages)
mark_shell_run()
inject_css()

try:
    ws = workspace()
except Exception as exc:  # bad settings or a missing model: say so, never a traceback
    logging.getLogger("marginalia").exception("could not start the workspace")
    st.error(f"Marginalia could not start: {escape_inline(str(exc))}", icon=":material/error:")
    st.stop()

render_sidebar(ws)
if st.session_state.pop("switch_to_chat", False) and current.url_path != chat_page.url_path:
    st.switch_page(chat_page)
current.run()
