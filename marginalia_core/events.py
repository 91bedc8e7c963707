"""The event stream (SPEC.md "Event stream", docs/EVENTS.md): typed events with snake_case keys
inside Python, turned into the camelCase NDJSON wire contract in one place, :func:`to_wire`.

The chat page, the CLI and the tests consume the same events; only the CLI (and anything else
that writes JSON for other programs) calls :func:`to_json`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, NotRequired, TypedDict


class Source(TypedDict, total=False):
    """A retrieved passage as the answer numbers it: ``n`` is its citation mark."""

    n: int
    chunk_id: int
    document_id: str
    document_name: str
    idx: int
    page: int
    page_end: int
    score: float
    excerpt: str
    content: str
    ocr: bool  # text read from a scan by OCR (absent in sources saved before issue 12)
    location: str  # "p. 3", "slide 3", "sheet Budget, rows 12–40", "" (absent before issue 26)


class MetaEvent(TypedDict):
    type: Literal["meta"]
    conversation_id: str
    title: str
    sources: list[Source]
    query: NotRequired[str]  # what was actually searched (a follow-up is rewritten)
    documents: list[str] | None  # the document ids searched; None = all


class TokenEvent(TypedDict):
    """A piece of the answer, its marks already in the final (``done``) numbering. ``cited``
    comes when the piece cites a source for the first time: meta's numbers in the order first
    cited, so final mark ``i + 1`` is meta's source ``cited[i]``."""

    type: Literal["token"]
    text: str
    cited: NotRequired[list[int]]


class DoneEvent(TypedDict, total=False):
    """End of a stream. Chat: ``message_id``, ``conversation_id``, ``citations``,
    ``invalid_citations``, ``answer`` and ``sources`` (as saved: renumbered in the order the
    answer first cites them), ``support`` (each marked sentence checked against the passages it
    cites: ``chat.support.SentenceSupport.as_dict``). Ingestion: ``file``, ``document``, ``duplicate``. CLI:
    ``deleted``."""

    type: Literal["done"]
    message_id: str
    conversation_id: str
    citations: list[int]
    invalid_citations: list[int]
    answer: str
    sources: list[Source]
    status: str  # chat: "complete", or "stopped" when the reader stopped the answer
    outcome: str  # chat: "answered", "no_sources" (nothing matched) or "refused" (not answered)
    support: list[dict[str, Any]]
    file: str
    document: dict[str, Any]
    duplicate: bool
    reindexed: bool
    message: str
    deleted: str


class ErrorEvent(TypedDict, total=False):
    type: Literal["error"]
    message: str
    reason: str
    conversation_id: str
    file: str
    document_id: str
    existing_id: str  # near_duplicate: the document already indexed with this text
    existing_name: str


class StageEvent(TypedDict, total=False):
    """Ingestion progress: ``extracting``, ``ocr``, ``chunking``, ``embedding`` (done/total),
    ``storing``."""

    type: Literal["stage"]
    stage: str
    file: str
    done: int
    total: int
    characters: int
    chunks: int
    pages: int
    cached: int  # embedding: distinct passages reused from the embedding cache, not in total


ChatEvent = MetaEvent | TokenEvent | DoneEvent | ErrorEvent
IngestEvent = StageEvent | DoneEvent | ErrorEvent
Event = ChatEvent | StageEvent


def meta(
    conversation_id: str,
    title: str,
    sources: list[Source],
    *,
    query: str | None = None,
    documents: list[str] | None = None,
) -> MetaEvent:
    """``documents``: the ids the question was limited to; None (always present) = all."""
    event: MetaEvent = {
        "type": "meta", "conversation_id": conversation_id, "title": title, "sources": sources,
        "documents": documents,
    }
    if query is not None:
        event["query"] = query
    return event


def token(text: str, cited: list[int] | None = None) -> TokenEvent:
    event: TokenEvent = {"type": "token", "text": text}
    if cited is not None:
        event["cited"] = cited
    return event


def done(**fields: Any) -> DoneEvent:
    return {"type": "done", **fields}  # type: ignore[typeddict-item]


def error(message: str, reason: str = "error", **fields: Any) -> ErrorEvent:
    return {"type": "error", "message": message, "reason": reason, **fields}  # type: ignore[typeddict-item]


def stage(name: str, file: str, **fields: Any) -> StageEvent:
    return {"type": "stage", "stage": name, "file": file, **fields}  # type: ignore[typeddict-item]


_SNAKE = re.compile(r"_([a-z0-9])")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD. JSON may carry one ("\\ud800") and a command
    line's undecodable byte becomes one; neither can be written as UTF-8, so a question holding
    one failed in the tokenizer, the database and every JSON reply."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def camel(key: str) -> str:
    """``conversation_id`` -> ``conversationId``; keys without an underscore are unchanged."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), key)


def to_wire(value: Any) -> Any:
    """The wire form of an event (or any value inside one): every dict key in camelCase."""
    if isinstance(value, dict):
        return {camel(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    return value


def to_json(event: Any) -> str:
    """One NDJSON line of the wire contract."""
    return json.dumps(to_wire(event), ensure_ascii=False, separators=(",", ":"))
