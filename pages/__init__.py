"""Marginalia's Streamlit pages (listed explicitly by ``st.navigation`` in app.py) and the
helpers they share (``pages.common``). A regular package, so ``import pages.common`` always
resolves to this folder."""
