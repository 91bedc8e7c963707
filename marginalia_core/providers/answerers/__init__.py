"""Answerer registry. Entries are classes or ``"module:Class"`` strings resolved on first use, so
importing this package pulls in neither google-genai nor modules that are not written yet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from marginalia_core.providers.answerers.base import Answerer, HistoryTurn, Source
from marginalia_core.registry import resolve

if TYPE_CHECKING:
    from marginalia_core.config import Settings

ANSWERERS: dict[str, type | str] = {
    "gemini": "marginalia_core.providers.answerers.gemini:GeminiAnswerer",
    "extractive": "marginalia_core.providers.answerers.extractive:ExtractiveAnswerer",
    "openai": "marginalia_core.providers.answerers.openai:OpenAIAnswerer",
}


def answerer_class(name: str) -> type:
    """The class registered under ``name`` (importing it if registered by path)."""
    return resolve(ANSWERERS, name, "answerer")


def get_answerer(settings: Settings, **kwargs: Any) -> Answerer:
    """The answerer ``settings.answerer_name`` selects ("gemini" when a key is set, else
    "extractive"), built as ``cls(settings, **kwargs)``."""
    return answerer_class(settings.answerer_name)(settings, **kwargs)


__all__ = ["ANSWERERS", "Answerer", "HistoryTurn", "Source", "answerer_class", "get_answerer"]
