"""The chat engine: question -> retrieve -> ``meta`` -> ``token``... -> ``done`` | ``error``.

``meta`` carries every retrieved source before the first token, so marks are clickable the moment
the answer starts. The question and its answer are saved together, only once the answer is
complete, with only the sources the answer actually cites (each with its ``n``, so a reloaded
conversation maps every mark to its passage); a failed, interrupted or abandoned answer (the
consumer closing the generator) saves nothing, not even a new conversation's row.

With no passage above the threshold the engine says so itself; no model is called. Follow-ups
retrieve with the previous question borrowed (``prompting.retrieval_query``) and send the last
``HISTORY`` messages as user/model turns, the earlier answers without their ``[n]`` marks (those
numbered other sources).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from marginalia_core import events
from marginalia_core.citations import MARK_RE, cited
from marginalia_core.config import Settings
from marginalia_core.errors import MarginaliaError, NotFoundError
from marginalia_core.providers.answerers.base import Answerer
from marginalia_core.providers.answerers.prompting import (
    NO_DOCUMENTS_ANSWER,
    NO_SOURCES_ANSWER,
    build_system_instruction,
    retrieval_query,
)
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.sqlite import new_id

log = logging.getLogger(__name__)

HISTORY = 10  # messages sent as user/model turns
TITLE_CHARS = 64
MAX_QUESTION_CHARS = 8_000
ID_RE = re.compile(r"^[0-9a-f]{32}$")  # the shape of store.new_id()


def make_title(question: str) -> str:
    return " ".join(question.split())[:TITLE_CHARS]


def history_turn(message: dict[str, Any]) -> dict[str, str]:
    """A stored message as a history turn. An earlier answer's ``[n]`` marks numbered *its*
    sources, not this question's, so they are removed rather than left to be misread."""
    content = message["content"]
    if message["role"] == "assistant":
        content = re.sub(r"[ \t]+([.,;:!?])", r"\1", MARK_RE.sub("", content))
    return {"role": message["role"], "content": content}


class ChatEngine:
    def __init__(self, store: LibraryStore, retriever: Retriever, answerer: Answerer, settings: Settings):
        self.store = store
        self.retriever = retriever
        self.answerer = answerer
        self.settings = settings

    def ask(
        self,
        question: str,
        conversation_id: str | None = None,
        *,
        k: int | None = None,
        threshold: float | None = None,
    ) -> Iterator[events.ChatEvent]:
        question = (question or "").strip()
        if not question:
            yield events.error("Ask a question first: the message is empty.", "empty")
            return
        if len(question) > MAX_QUESTION_CHARS:
            yield events.error(
                f"The question is too long ({len(question):,} characters; the limit is "
                f"{MAX_QUESTION_CHARS:,}).",
                "too_long",
            )
            return
        try:
            conversation_id, title, history = self._conversation(conversation_id, question)
            query = retrieval_query(question, history)
            hits = self.retriever.search(query, k=k, threshold=threshold)
        except MarginaliaError as exc:
            yield events.error(exc.message, exc.reason)
            return
        except Exception as exc:
            log.exception("retrieval failed")
            yield events.error(f"Search failed: unexpected {type(exc).__name__}.", "internal")
            return

        sources = [hit.as_source(n) for n, hit in enumerate(hits, start=1)]
        yield events.meta(conversation_id, title, sources, query=query)

        if not sources:
            answer = NO_SOURCES_ANSWER if len(self.retriever.index) else NO_DOCUMENTS_ANSWER
            mismatch = self.retriever.mismatch()
            if mismatch and not len(self.retriever.index):
                answer = mismatch.message
            yield events.token(answer)
            yield from self._finish(conversation_id, title, question, answer, sources)
            return

        parts: list[str] = []
        try:
            stream = self.answerer.stream(
                question,
                sources,
                history,
                system_instruction=build_system_instruction(sources),
            )
            try:
                for piece in stream:
                    if piece:
                        parts.append(piece)
                        yield events.token(piece)
            finally:
                # a consumer that stops early also closes the model's stream (its HTTP
                # connection) at once, not whenever the generator is garbage-collected
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        except MarginaliaError as exc:
            yield events.error(exc.message, exc.reason, conversation_id=conversation_id)
            return
        except Exception as exc:
            log.exception("answerer failed")
            yield events.error(
                f"The answer failed: unexpected {type(exc).__name__}. Nothing was saved.",
                "internal",
                conversation_id=conversation_id,
            )
            return
        answer = "".join(parts)
        if not answer.strip():
            yield events.error(
                "The model returned an empty answer. Nothing was saved.",
                "empty_answer",
                conversation_id=conversation_id,
            )
            return
        yield from self._finish(conversation_id, title, question, answer, sources)

    def _conversation(
        self, conversation_id: str | None, question: str
    ) -> tuple[str, str, list[dict[str, str]]]:
        """(id, title, history) for this question. A new conversation gets its id now but is
        only stored with its first complete answer; so an id that ``meta`` announced for an
        answer that then failed is still good for the retry, which starts it."""
        if not conversation_id:
            return new_id(), make_title(question), []
        try:
            title = self.store.get_conversation(conversation_id)["title"]
        except NotFoundError:
            if not ID_RE.match(conversation_id):
                raise
            return conversation_id, make_title(question), []
        messages = self.store.messages(conversation_id, limit=HISTORY)
        return conversation_id, title, [history_turn(m) for m in messages]

    def _finish(
        self,
        conversation_id: str,
        title: str,
        question: str,
        answer: str,
        sources: list[events.Source],
    ) -> Iterator[events.ChatEvent]:
        valid, invalid = cited(answer, len(sources))
        keep = [s for s in sources if s["n"] in valid]
        try:
            _, message = self.store.add_exchange(conversation_id, title, question, answer, keep)
        except Exception as exc:
            log.exception("saving the answer failed")
            yield events.error(
                f"The answer could not be saved ({type(exc).__name__}).",
                "storage",
                conversation_id=conversation_id,
            )
            return
        yield events.done(
            message_id=message["id"],
            conversation_id=conversation_id,
            citations=valid,
            invalid_citations=invalid,
        )
