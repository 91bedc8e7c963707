"""Embeddings from any OpenAI-compatible server's ``/v1/embeddings`` (Ollama, llama.cpp, vLLM,
LM Studio, api.openai.com) through the ``openai`` SDK.

The model name and the server address are both part of ``model`` (and so of the embedder key
the store records per document): vectors from another server or model are never ranked with
these. The dimension is whatever the server returns: learnt from the first response (a one-line
probe when it is needed before anything was embedded, e.g. to open the index) and remembered per
server and model for the process; a later response of another size is an error.

Documents go out in batches of ``batch_size`` texts, up to ``settings.openai_concurrency``
batches in flight, each retried on 429/5xx/timeouts/refused connections. Vectors are
L2-normalized here (servers differ on whether they normalize).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from marginalia_core.errors import AuthenticationError, EmbeddingError, MarginaliaError
from marginalia_core.providers import openai_client
from marginalia_core.providers.embeddings.base import (
    EmbedderBase,
    ProgressFn,
    embed_in_batches,
    l2_normalize,
)
from marginalia_core.providers.retry import RetryPolicy

if TYPE_CHECKING:
    from marginalia_core.config import Settings

DEFAULT_BATCH = 32  # texts per request; small enough for llama.cpp's default batch size
MAX_BATCH = 2048  # OpenAI's own per-request limit
DEFAULT_CONCURRENCY = 2
# Unknown models: general-purpose embedders (nomic-embed-text, bge, text-embedding-3-*) put
# unrelated passages at ~0.0-0.25 and relevant ones at ~0.35-0.8. MARGINALIA_THRESHOLD overrides.
DEFAULT_THRESHOLD = 0.3
PROBE_TEXT = "dimension probe"
QUERY_DEADLINE_TIMEOUTS = 2.0  # a question's embedding gives up after this many timeouts
NO_MODEL = (
    "No embedding model is set for the model server — set MARGINALIA_EMBED_MODEL to one it "
    "serves (e.g. nomic-embed-text for Ollama)."
)
KEY_PREFIX = "openai"

_dims: dict[str, int] = {}  # model key -> dimension learnt this process
_dims_lock = threading.Lock()


def model_key(server: str, model: str) -> str:
    """What the store records as this embedder's model: ``openai:<model>|<server>``."""
    return f"{KEY_PREFIX}:{model}|{server}"


class OpenAIEmbedder(EmbedderBase):
    name = "openai"
    batch_size = DEFAULT_BATCH
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
        if not settings.embed_model:
            raise EmbeddingError(NO_MODEL)
        self.model_name = settings.embed_model
        self.server = openai_client.server_label(openai_client.base_url(settings))
        self.model = model_key(self.server, self.model_name)
        self._api_key = settings.openai_api_key
        self._query_deadline_s = QUERY_DEADLINE_TIMEOUTS * settings.openai_timeout_s
        self._client = client if client is not None else openai_client.make_client(settings)
        self.retry = retry or RetryPolicy()
        limit = concurrency if concurrency is not None else settings.openai_concurrency
        self.concurrency = max(1, int(limit or DEFAULT_CONCURRENCY))
        if batch_size is not None:
            self.batch_size = max(1, min(MAX_BATCH, int(batch_size)))

    # ------------------------------------------------------------------ dimension
    @property
    def dimension(self) -> int:  # type: ignore[override]
        """The server's vector size for this model; probes once if nothing was embedded yet."""
        with _dims_lock:
            known = _dims.get(self.model)
        if known is None:
            self._request([PROBE_TEXT], query=True)
            with _dims_lock:
                known = _dims[self.model]
        return known

    def remember_dimension(self, dim: int) -> None:
        """Take the size the library recorded for this key (no probe needed); a server that
        later answers with another size is reported by ``_learn``."""
        with _dims_lock:
            _dims.setdefault(self.model, int(dim))

    def _learn(self, dim: int) -> None:
        with _dims_lock:
            known = _dims.setdefault(self.model, dim)
        if known != dim:
            raise EmbeddingError(
                f"The model {self.model_name!r} on {self.server} returned {dim}-dimensional "
                f"embeddings, but {known}-dimensional ones earlier; was another model loaded "
                "under the same name? Restart Marginalia and re-index."
            )

    # ------------------------------------------------------------------ one request
    def _request(
        self, texts: Sequence[str], *, query: bool, cancel: threading.Event | None = None
    ) -> np.ndarray:
        """One /embeddings call (with retries) -> normalized float32 (len(texts), dim)."""
        contents = [t if t.strip() else " " for t in texts]  # some servers refuse ""

        def call() -> Any:
            return self._client.embeddings.create(
                model=self.model_name, input=contents, encoding_format="float"
            )

        deadline = time.monotonic() + self._query_deadline_s if query else None
        try:
            response = self.retry.call(
                call, retryable=openai_client.is_retryable, cancel=cancel, deadline=deadline
            )
        except MarginaliaError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc
        data = list(getattr(response, "data", None) or [])
        if len(data) != len(contents):
            raise EmbeddingError(
                f"The model server returned {len(data)} embeddings for {len(contents)} texts."
            )
        data.sort(key=lambda d: getattr(d, "index", 0) or 0)
        try:
            matrix = np.asarray([d.embedding for d in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                "The model server returned embeddings that could not be read."
            ) from exc
        if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
            raise EmbeddingError("The model server returned empty or invalid embeddings.")
        self._learn(int(matrix.shape[1]))
        return l2_normalize(matrix)

    def _error(self, exc: BaseException) -> EmbeddingError:
        message = openai_client.describe_error(
            exc,
            server=self.server,
            model=self.model_name,
            api_key=self._api_key,
            model_setting="MARGINALIA_EMBED_MODEL",
        )
        if openai_client.is_auth_error(exc):
            return AuthenticationError(message)
        return EmbeddingError(f"Embedding failed: {message}")

    # ------------------------------------------------------------------ interface
    def embed_batch(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [
            self._request(texts[i : i + self.batch_size], query=query)
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.vstack(parts)

    def embed_documents(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``, up to ``concurrency`` batches in flight
        (``embed_in_batches``); order is preserved, and on any failure nothing is returned."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = embed_in_batches(self._request, texts, batch_size=self.batch_size,
                                 concurrency=self.concurrency, progress=progress,
                                 thread_prefix="openai-embed")
        return np.vstack(parts).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._request([text], query=True)[0]
