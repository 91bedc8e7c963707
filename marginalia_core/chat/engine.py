"""The chat engine: question -> retrieve -> ``meta`` -> ``token``... -> ``done`` | ``error``.

``meta`` carries every retrieved source before the first token, so marks are clickable the moment
the answer starts. The question and its answer are saved together, only once the answer is
complete, with only the sources the answer actually cites (each with its ``n``, so a reloaded
conversation maps every mark to its passage); a failed, interrupted or abandoned answer (the
consumer closing the generator) saves nothing, not even a new conversation's row.

With no passage above the threshold the engine says so itself; no model is called. A
follow-up ("and what about light?") is searched rewritten: by the answerer's ``rewrite_query``
when it has one (Gemini: one short call), else, or when that fails, by the offline
``prompting.rewrite_follow_up`` (the topic words of the last exchange carried along). ``meta``'s
``query`` and the saved answer's ``query`` are what was searched. The last ``HISTORY`` messages
go to the answerer as user/model turns, earlier answers without their ``[n]`` marks (those
numbered other sources).

Citations are renumbered as the answer streams: the sources it cites become [1], [2], ... in
the order it first cites them (``citations.StreamRenumberer``), so every ``token`` already
carries the numbering ``done`` and the saved answer have; a token that cites a source for the
first time says which of ``meta``'s sources it is (``cited``). ``done`` carries the final
``answer`` and ``sources``, which is also what is saved. Every answer, whoever wrote it, is then
checked sentence by sentence against the passages it cites (``chat.support``, with the local
embedder's cosine when that is the active embedder; a remote one is never called for it):
``done``'s ``support`` lists each marked sentence's score, saved with the message.

``stop`` (a ``threading.Event``) ends an answer early on purpose: what was streamed so far is
saved with the question, marked ``status="stopped"`` (an empty answer when nothing was said
yet), so a stopped question is never lost. A conversation can be limited to some documents
(``documents``), kept on the conversation and honoured by every retrieval mode.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

from marginalia_core import events
from marginalia_core.chat.support import check_support
from marginalia_core.citations import MARK_RE, StreamRenumberer, renumber_sources
from marginalia_core.config import Settings
from marginalia_core.errors import MarginaliaError, NotFoundError
from marginalia_core.providers.answerers.base import Answerer, HistoryTurn
from marginalia_core.providers.answerers.extractive import is_refusal
from marginalia_core.providers.answerers.prompting import (
    NO_DOCUMENTS_ANSWER,
    NO_SOURCES_ANSWER,
    build_system_instruction,
    is_follow_up,
    rewrite_follow_up,
)
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.records import ANSWER_COMPLETE, ANSWER_STOPPED, Message
from marginalia_core.store.rows import KEEP, Keep, new_id

log = logging.getLogger(__name__)

# What an answer did, in ``done`` and for a saved message (``outcome``): the pages decide what
# to offer (the retrieval settings, "Search all documents") by it, never by the answer's text.
ANSWERED, NO_SOURCES, REFUSED = "answered", "no_sources", "refused"

HISTORY = 10  # messages sent as user/model turns
COMPLETE, STOPPED = ANSWER_COMPLETE, ANSWER_STOPPED  # a saved answer's status
TITLE_CHARS = 64
MAX_QUESTION_CHARS = 8_000
ID_RE = re.compile(r"^[0-9a-f]{32}$")  # the shape of store.new_id()


def new_conversation_id() -> str:
    """An id of the shape ``ask`` accepts for a conversation it is to start."""
    return new_id()


def make_title(question: str) -> str:
    return " ".join(question.split())[:TITLE_CHARS]


def history_turn(message: Message) -> HistoryTurn:
    """A stored message as a history turn. An earlier answer's ``[n]`` marks numbered *its*
    sources, not this question's, so they are removed rather than left to be misread."""
    if message.role == "assistant":
        content = re.sub(r"(?<![ \t])[ \t]+([.,;:!?])", r"\1", MARK_RE.sub("", message.content))
        return HistoryTurn(role="assistant", content=content)
    return HistoryTurn(role="user", content=message.content)


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
        documents: Sequence[str] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[events.ChatEvent]:
        """Answer ``question`` as events. ``documents`` limits this question and the
        conversation from now on to those document ids (empty: all documents again); None
        keeps the conversation's own choice (all, for a new one). Setting ``stop`` ends the
        answer where it is, saved as ``stopped``."""
        question = events.well_formed(question or "").strip()
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
            conversation_id, title, history, scope = self._conversation(conversation_id, question)
            chosen: list[str] | None | Keep = KEEP
            if documents is not None:
                chosen = self.checked_documents(documents)
                scope = chosen
            query = self.rewrite(question, history)
            hits = self.retriever.search(query, k=k, threshold=threshold, documents=scope)
        except MarginaliaError as exc:
            yield events.error(exc.message, exc.reason)
            return
        except Exception as exc:
            log.exception("retrieval failed")
            yield events.error(f"Search failed: unexpected {type(exc).__name__}.", "internal")
            return

        sources = [hit.as_source(n) for n, hit in enumerate(hits, start=1)]
        yield events.meta(conversation_id, title, sources, query=query, documents=scope)

        if not sources and not len(self.retriever.index):
            # nothing searchable at all: a notice, not an exchange worth keeping (no
            # conversation is created for it)
            mismatch = self.retriever.mismatch()
            yield events.error(
                mismatch.message if mismatch else NO_DOCUMENTS_ANSWER,
                "embedder_mismatch" if mismatch else "no_documents",
                conversation_id=conversation_id,
            )
            return
        if not sources:
            answer = NO_SOURCES_ANSWER
            yield events.token(answer)
            yield from self._finish(
                conversation_id, title, question, answer, sources, query=query, documents=chosen
            )
            return

        parts: list[str] = []
        marks = StreamRenumberer(len(sources))
        status = COMPLETE
        try:
            passages = cast(list[dict[str, Any]], sources)  # the answerers read them as mappings
            stream = self.answerer.stream(
                question,
                passages,
                history,
                system_instruction=build_system_instruction(passages),
            )
            try:
                for piece in stream:
                    if stop is not None and stop.is_set():
                        status = STOPPED
                        break
                    if piece:
                        parts.append(piece)
                        yield from self._token(marks, marks.feed(piece))
                if stop is not None and stop.is_set():
                    status = STOPPED
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
        yield from self._token(marks, marks.finish())
        answer = "".join(parts)
        if not answer.strip() and status != STOPPED:
            yield events.error(
                "The model returned an empty answer. Nothing was saved.",
                "empty_answer",
                conversation_id=conversation_id,
            )
            return
        yield from self._finish(
            conversation_id, title, question, answer, sources, query=query, documents=chosen,
            status=status,
        )

    @staticmethod
    def _token(marks: StreamRenumberer, text: str) -> Iterator[events.TokenEvent]:
        if text:
            yield events.token(text, marks.newly_cited())

    def rewrite(self, question: str, history: list[HistoryTurn]) -> str:
        """The query a question is searched with. Only a follow-up is rewritten: by the
        answerer's model when it offers ``rewrite_query``, falling back to the offline rewrite
        when the call fails or its reply is unusable."""
        if not history or not is_follow_up(question):
            return question
        model_rewrite = getattr(self.answerer, "rewrite_query", None)
        if model_rewrite is not None:
            try:
                query = model_rewrite(question, history)
            except Exception as exc:  # any failure: the offline rewrite still answers
                log.warning("follow-up rewrite failed (%s); using the offline rewrite",
                            type(exc).__name__)
                query = None
            if query:
                return query
        return rewrite_follow_up(question, history).query

    def checked_documents(self, documents: Sequence[str]) -> list[str] | None:
        """The document ids a question is limited to (None: all), refusing unknown ids."""
        ids = list(dict.fromkeys(str(d).strip() for d in documents if str(d).strip()))
        if not ids:
            return None
        missing = self.store.missing_documents(ids)
        if missing:
            raise NotFoundError(
                f"No document with id {missing[0]!r}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + ". The ids are listed by `marginalia documents`, GET /api/documents, "
                "MCP's list_documents and on the Documents page."
            )
        return ids

    def _conversation(
        self, conversation_id: str | None, question: str
    ) -> tuple[str, str, list[HistoryTurn], list[str] | None]:
        """(id, title, history, document scope) for this question. A new conversation gets its
        id now but is only stored with its first complete answer; so an id that ``meta``
        announced for an answer that then failed is still good for the retry, which starts it."""
        if not conversation_id:
            return new_id(), make_title(question), [], None
        try:
            conversation = self.store.get_conversation(conversation_id)
        except NotFoundError:
            if not ID_RE.match(conversation_id):
                raise
            return conversation_id, make_title(question), [], None
        messages = self.store.messages(conversation_id, limit=HISTORY)
        return (
            conversation_id,
            conversation.title,
            [history_turn(m) for m in messages],
            conversation.documents,
        )

    def _finish(
        self,
        conversation_id: str,
        title: str,
        question: str,
        answer: str,
        sources: list[events.Source],
        *,
        query: str,
        documents: list[str] | None | Keep,
        status: str = COMPLETE,
    ) -> Iterator[events.ChatEvent]:
        answer, keep, valid, invalid = renumber_sources(answer, cast(list[dict], sources))
        support = [s.as_dict() for s in check_support(answer, keep, self._support_embedder())]
        try:
            _, message = self.store.add_exchange(
                conversation_id, title, question, answer, keep, query=query, documents=documents,
                support=support, status=status,
            )
        except Exception as exc:
            log.exception("saving the answer failed")
            yield events.error(
                f"The answer could not be saved ({type(exc).__name__}).",
                "storage",
                conversation_id=conversation_id,
            )
            return
        yield events.done(
            outcome=outcome(answer, keep),
            message_id=message.id,
            conversation_id=conversation_id,
            citations=valid,
            invalid_citations=invalid,
            answer=answer,
            sources=keep,
            status=status,
            support=support,
        )

    def _support_embedder(self) -> Any:
        """The embedder the support check may use: the local one only (no network, no cost)."""
        embedder = self.retriever.embedder
        return embedder if getattr(embedder, "name", "") == "local" else None


def outcome(answer: str, sources: Sequence[Any]) -> str:
    """``NO_SOURCES`` when no passage passed the threshold (the engine's "nothing matched"),
    ``REFUSED`` when the answerer found the passages do not answer ("not in your documents"),
    else ``ANSWERED``."""
    if not sources and answer == NO_SOURCES_ANSWER:
        return NO_SOURCES
    return REFUSED if is_refusal(answer) else ANSWERED
