"""One object that wires settings to the store, the chosen providers and the engines, so the app,
the CLI and the tests assemble Marginalia the same way."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from marginalia_core.config import Settings, load_settings
from marginalia_core.providers.embeddings import Embedder, get_embedder
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.store.sqlite import Store

if TYPE_CHECKING:
    from marginalia_core.chat.engine import ChatEngine
    from marginalia_core.providers.answerers.base import Answerer


class Workspace:
    def __init__(self, settings: Settings | None = None):
        self.settings = settings or load_settings()
        self._lock = threading.Lock()

    @cached_property
    def store(self) -> Store:
        return Store(self.settings.ensure_db_dir())

    @cached_property
    def embedder(self) -> Embedder:
        with self._lock:
            return get_embedder(self.settings)

    @cached_property
    def retriever(self) -> Retriever:
        return Retriever(self.store, self.embedder, self.settings)

    @cached_property
    def answerer(self) -> Answerer:
        from marginalia_core.providers.answerers import get_answerer

        if self.settings.answerer_name == "extractive":
            # the offline answerer reuses the embedder to match paraphrased sentences
            return get_answerer(self.settings, embedder=self.embedder)
        return get_answerer(self.settings)

    @cached_property
    def chat(self) -> ChatEngine:
        from marginalia_core.chat.engine import ChatEngine

        return ChatEngine(self.store, self.retriever, self.answerer, self.settings)

    def mode_summary(self) -> dict[str, str]:
        """What the UI and CLI show as the active mode; never includes the key."""
        s = self.settings
        return {
            "mode": "Gemini" if s.embedder_name == "gemini" or s.answerer_name == "gemini"
            else "Offline",
            "embedder": s.embedder_name,
            "answerer": s.answerer_name,
            "chat_model": s.chat_model if s.answerer_name == "gemini" else "",
            "retrieval": s.retrieval_mode,
            "db": s.db_path,
        }

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
