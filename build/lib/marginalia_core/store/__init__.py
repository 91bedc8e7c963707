"""Storage: the SQLite library (documents, chunks with their vectors, FTS5, conversations,
messages) and its versioned migrations. May import only the base modules (config, errors)."""
