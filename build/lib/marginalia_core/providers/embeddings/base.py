"""The embedder interface. Like simonw/llm's embedding plugins: a name, a batch size and
``embed_batch``; built-in providers are just implementations of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

ProgressFn = Callable[[int, int], None]


@runtime_checkable
class Embedder(Protocol):
    name: str  # registry name, e.g. "local"
    model: str  # model identifier stored with every document it indexed
    dimension: int
    batch_size: int
    default_threshold: float

    @property
    def key(self) -> str:
        """``model@dimension``: vectors with different keys are never ranked together."""
        ...

    def embed_documents(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def embedder_key(model: str, dimension: int) -> str:
    return f"{model}@{dimension}"


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Row-normalize to unit length (float32) so cosine similarity is a dot product."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        norm = float(np.linalg.norm(vectors))
        return vectors / norm if norm > 0 else vectors
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)


class EmbedderBase:
    """Shared helpers; concrete embedders implement ``embed_batch``."""

    name = "base"
    model = "base"
    dimension = 0
    batch_size = 32
    default_threshold = 0.35

    @property
    def key(self) -> str:
        return embedder_key(self.model, self.dimension)

    def embed_batch(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        raise NotImplementedError

    def embed_documents(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        done = 0
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            out[start : start + len(batch)] = self.embed_batch(batch, query=False)
            done += len(batch)
            if progress:
                progress(done, len(texts))
        return l2_normalize(out)

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalize(self.embed_batch([text], query=True)[0])
