"""Embed once: vectors an embedder has computed for this library, kept by the text's hash.

Ingestion, re-indexing, resumed jobs and the retrieval lab's passage-size sweeps all look here
before calling the embedder, so a re-saved copy of a book, a re-index with the same passage
size or a job resumed after an interruption embeds only text it has never seen. Keys are
(embedder key, SHA-256 of the text): another model, another dimension or another server's
model never shares a vector. Vectors are written as soon as each batch is embedded, in their
own small transaction, independent of the document's one: they are a cache, never a half
document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from marginalia_core.store.base import LibraryStore, text_hash


class EmbeddingCache:
    """One embedder's cached vectors in one library, looked up and added by text. Call it from
    one thread (the stores keep a connection per thread)."""

    def __init__(self, store: LibraryStore, embedder_key: str):
        self.store = store
        self.embedder_key = embedder_key

    def lookup(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached vector of each text that has one."""
        by_hash: dict[str, list[str]] = {}
        for text in texts:
            by_hash.setdefault(text_hash(text), []).append(text)
        if not by_hash:
            return {}
        found = self.store.cached_embeddings(self.embedder_key, list(by_hash))
        return {text: vector for digest, vector in found.items() for text in by_hash[digest]}

    def add(self, vectors: Mapping[str, np.ndarray]) -> None:
        """Keep these vectors (texts already cached keep their vector)."""
        self.store.cache_embeddings(
            self.embedder_key,
            {text_hash(t): np.asarray(v, dtype=np.float32) for t, v in vectors.items()},
        )
