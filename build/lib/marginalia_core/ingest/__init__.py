"""Ingestion: bytes -> text with its page map (extraction), passages (chunking), and the pipeline
that embeds and stores a document in one transaction. May import the base modules, ``store`` and
``providers``; never ``retrieval``, ``chat`` or the workspace."""
