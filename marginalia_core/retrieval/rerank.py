"""The rerank step of retrieval (candidates -> fuse -> threshold -> **rerank** -> top-k ->
text): a small interface, chosen by ``RetrievalConfig.reranker`` and registered by name like the
embedders and answerers, so a reranker reaches Chat, the Inspector and the metrics at once.

A reranker reorders (or drops) the passages that passed the threshold, before the top k is
taken; it must not depend on k (the metrics rank past it). ``passages(ids)`` gives their stored
rows (``content``, ``document_name``, pages, offsets) without another query when the caller
already holds them (an evaluation)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from marginalia_core.config import NO_RERANKER
from marginalia_core.registry import resolve

if TYPE_CHECKING:
    from marginalia_core.providers.embeddings.base import Embedder
    from marginalia_core.retrieval.retriever import RankedChunk

Passages = Callable[[Sequence[int]], Mapping[int, Mapping[str, Any]]]


class Reranker(Protocol):
    """Built once per retriever with its embedder: ``cls(embedder)``."""

    def rerank(
        self, query: str, ranked: Sequence[RankedChunk], passages: Passages
    ) -> list[RankedChunk]: ...


class KeepOrder:
    """No reranking: the fused (or single-list) order stands. The default."""

    def __init__(self, embedder: Embedder | None = None):
        self.embedder = embedder

    def rerank(
        self, query: str, ranked: Sequence[RankedChunk], passages: Passages
    ) -> list[RankedChunk]:
        return list(ranked)


# name -> class or "module:Class" (imported on first use)
RERANKERS: dict[str, type | str] = {NO_RERANKER: KeepOrder}


def reranker_class(name: str) -> type:
    return resolve(RERANKERS, name or NO_RERANKER, "reranker")


def get_reranker(name: str, embedder: Embedder) -> Reranker:
    return reranker_class(name)(embedder)
