"""The embedder interface. Like simonw/llm's embedding plugins: a name, a batch size and
``embed_batch``; built-in providers are just implementations of it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
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


# request(batch, query=..., cancel=...) -> one row per text of the batch
BatchRequest = Callable[..., np.ndarray]


def embed_in_batches(
    request: BatchRequest,
    texts: Sequence[str],
    *,
    batch_size: int,
    concurrency: int,
    progress: ProgressFn | None = None,
    thread_prefix: str = "embed",
) -> list[np.ndarray]:
    """The remote embedders' document path: batches of ``batch_size``, up to ``concurrency``
    in flight, returned in order. ``progress(done, total)`` is called from this thread as
    batches finish. On a failure the first error is raised after the other in-flight batches
    stop (their ``cancel`` event is set; queued ones never start), so nothing is returned."""
    texts = list(texts)
    total = len(texts)
    starts = list(range(0, total, batch_size))
    results: dict[int, np.ndarray] = {}
    workers = min(concurrency, len(starts))
    if workers <= 1:
        for start in starts:
            results[start] = request(texts[start : start + batch_size], query=False)
            if progress:
                progress(start + len(results[start]), total)
        return [results[s] for s in starts]

    cancel = threading.Event()
    done = 0
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_prefix)
    try:
        pending: dict[Future, int] = {
            pool.submit(request, texts[start : start + batch_size], query=False,
                        cancel=cancel): start
            for start in starts
        }
        while pending:
            finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in finished:
                start = pending.pop(fut)
                exc = fut.exception()
                if exc is not None:
                    cancel.set()
                    for other in pending:
                        other.cancel()
                    raise exc
                results[start] = fut.result()
                done += len(results[start])
                if progress:
                    progress(done, total)
    finally:
        cancel.set()
        # batches already on the wire finish (bounded by the request timeout) so no request
        # outlives this call; queued ones were cancelled above
        pool.shutdown(wait=True, cancel_futures=True)
    return [results[s] for s in starts]
