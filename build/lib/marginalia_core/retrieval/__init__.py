"""Retrieval: the resident vector index (ranking), FTS5 BM25 and fusion (lexical), and the
Retriever that combines them into cited passages. May import the base modules, ``store`` and
``providers``; never ``ingest`` or ``chat``."""
