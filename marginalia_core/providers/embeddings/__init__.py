"""Embedding providers, chosen by name from settings. Built-ins are registered like plugins."""

from __future__ import annotations

from marginalia_core.config import Settings
from marginalia_core.providers.embeddings.base import (
    Embedder,
    EmbedderBase,
    embedder_key,
    l2_normalize,
)
from marginalia_core.registry import resolve

# name -> "module:Class"; imported on first use so a missing optional dependency only matters
# when that provider is chosen
EMBEDDERS: dict[str, type | str] = {
    "local": "marginalia_core.providers.embeddings.local:LocalEmbedder",
    "gemini": "marginalia_core.providers.embeddings.gemini:GeminiEmbedder",
    "openai": "marginalia_core.providers.embeddings.openai:OpenAIEmbedder",
}


def embedder_class(name: str) -> type:
    return resolve(EMBEDDERS, name, "embedder")


def get_embedder(settings: Settings) -> Embedder:
    return embedder_class(settings.embedder_name)(settings)


__all__ = [
    "EMBEDDERS",
    "Embedder",
    "EmbedderBase",
    "embedder_class",
    "embedder_key",
    "get_embedder",
    "l2_normalize",
]
