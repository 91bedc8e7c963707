"""The Streamlit side of Marginalia: what the page scripts in ``pages/`` share (the app shell,
the sidebar, display formatting). Layout and formatting only; all behaviour is in
``marginalia_core``, which never imports this package."""
