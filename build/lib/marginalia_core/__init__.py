"""Marginalia core: everything that is not UI. Importable and testable without Streamlit."""

__version__ = "0.1.0"
