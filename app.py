"""Marginalia: chat with your documents; every answer cites the passages it came from.

Run with ``streamlit run app.py``. The shell (navigation, sidebar, the one Workspace per process)
lives in ``marginalia_app.shell``; the pages are in ``pages/``.
"""

from marginalia_app.shell import run_app

run_app()
