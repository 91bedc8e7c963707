"""Gemini embeddings (gemini-embedding-001 truncated to 768 dims) through google-genai.

Documents are embedded with task type RETRIEVAL_DOCUMENT and queries with RETRIEVAL_QUERY. The API
accepts at most MAX_BATCH texts per request, so documents go out in batches, several at once
(``settings.gemini_concurrency``), each retried on 429/5xx/timeouts. Vectors truncated below
3072 dims are not unit length, so every vector is L2-normalized here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from marginalia_core.errors import AuthenticationError, EmbeddingError
from marginalia_core.providers.embeddings.base import (
    EmbedderBase,
    ProgressFn,
    embed_in_batches,
    l2_normalize,
)
from marginalia_core.providers.gemini_client import (
    RetryPolicy,
    describe_api_error,
    is_auth_error,
    is_retryable,
    make_client,
    retry_after_seconds,
)

if TYPE_CHECKING:
    from marginalia_core.config import Settings

EMBED_MODEL = "gemini-embedding-001"
EMBED_DIM = 768
MAX_BATCH = 100  # the API refuses more than 100 requests in one batchEmbedContents call
DEFAULT_THRESHOLD = 0.35
DEFAULT_CONCURRENCY = 4
TASK_DOCUMENT = "RETRIEVAL_DOCUMENT"
TASK_QUERY = "RETRIEVAL_QUERY"
# A question's embedding sits in front of every answer: past this many request timeouts the
# user gets an error instead of more retries.
QUERY_DEADLINE_TIMEOUTS = 2.0


class GeminiEmbedder(EmbedderBase):
    name = "gemini"
    model = EMBED_MODEL
    dimension = EMBED_DIM
    batch_size = MAX_BATCH
    default_threshold = DEFAULT_THRESHOLD

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        retry: RetryPolicy | None = None,
        concurrency: int | None = None,
        batch_size: int | None = None,
    ):
        self._api_key = settings.gemini_api_key
        self._query_deadline_s = QUERY_DEADLINE_TIMEOUTS * settings.gemini_timeout_s
        self._client = client if client is not None else make_client(settings)
        self.retry = retry or RetryPolicy()
        limit = concurrency if concurrency is not None else settings.gemini_concurrency
        self.concurrency = max(1, int(limit or DEFAULT_CONCURRENCY))
        if batch_size is None:
            batch_size = getattr(settings, "embed_batch", None)
        if batch_size is not None:
            self.batch_size = max(1, min(MAX_BATCH, int(batch_size)))

    # ------------------------------------------------------------------ one request
    def _request(
        self, texts: Sequence[str], *, query: bool, cancel: threading.Event | None = None
    ) -> np.ndarray:
        """One batchEmbedContents call (with retries) -> normalized float32 (len(texts), dim)."""
        from google.genai import types

        config = types.EmbedContentConfig(
            task_type=TASK_QUERY if query else TASK_DOCUMENT,
            output_dimensionality=self.dimension,
        )
        contents: Any = list(texts)  # the SDK takes a list of str; its union type does not say so

        def call() -> Any:
            return self._client.models.embed_content(
                model=self.model, contents=contents, config=config
            )

        deadline = time.monotonic() + self._query_deadline_s if query else None
        try:
            response = self.retry.call(
                call,
                retryable=is_retryable,
                hint=retry_after_seconds,
                cancel=cancel,
                deadline=deadline,
            )
        except Exception as exc:
            raise self._error(exc) from exc
        embeddings = response.embeddings or []
        if len(embeddings) != len(contents):
            raise EmbeddingError(
                f"Gemini returned {len(embeddings)} embeddings for {len(contents)} texts."
            )
        try:
            matrix = np.asarray([e.values for e in embeddings], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError("Gemini returned embeddings that could not be read.") from exc
        if matrix.shape != (len(contents), self.dimension):
            raise EmbeddingError(
                f"Gemini returned {matrix.shape[-1] if matrix.ndim == 2 else 0}-dimensional "
                f"embeddings; expected {self.dimension}."
            )
        return l2_normalize(matrix)

    def _error(self, exc: BaseException) -> EmbeddingError:
        message = describe_api_error(exc, api_key=self._api_key)
        if is_auth_error(exc):
            return AuthenticationError(message)
        return EmbeddingError(f"Embedding failed: {message}")

    # ------------------------------------------------------------------ interface
    def embed_batch(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if len(texts) <= MAX_BATCH:
            return self._request(texts, query=query)
        parts = [
            self._request(texts[i : i + MAX_BATCH], query=query)
            for i in range(0, len(texts), MAX_BATCH)
        ]
        return np.vstack(parts)

    def embed_documents(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``, up to ``concurrency`` batches in flight
        (``embed_in_batches``); order is preserved. On any failure nothing is returned: the
        first error is raised (as AuthenticationError/EmbeddingError) after the other in-flight
        batches stop."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = embed_in_batches(self._request, texts, batch_size=self.batch_size,
                                 concurrency=self.concurrency, progress=progress,
                                 thread_prefix="gemini-embed")
        return np.vstack(parts).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_batch([text], query=True)[0]
