"""The typed records both store backends return: what a caller reads of a stored row, by
attribute, the same class whichever database holds the library.

Pure Python, no SQL: each record is built from a row mapping (by column name) with one shared
constructor, so SQLite and PostgreSQL cannot drift apart in what they hand back. ``to_dict``
gives the plain JSON-ready form the wire surfaces (HTTP API, MCP, CLI ``--json``, NDJSON
events) have always carried, with the same keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

EMPTY_LIST_JSON = "[]"  # a stored empty list (OCR pages, locations, sources)
NO_HEALTH_JSON = "{}"  # parse health of a document indexed before it was checked
# a saved answer's status: complete, or stopped (the reader pressed Stop; saved as far as it got)
ANSWER_COMPLETE, ANSWER_STOPPED = "complete", "stopped"


def _decoded(value: Any, empty: str) -> Any:
    """A JSON column's value decoded (already decoded values pass through)."""
    if isinstance(value, str | bytes):
        return json.loads(value or empty)
    return json.loads(empty) if value is None else value


@dataclass(frozen=True)
class Document:
    """One indexed document, as both backends return it (``list_documents``,
    ``get_document``, ``add_document`` ...): a typed record rather than a dict, so a misspelt
    field fails where it is read and mypy sees what every surface relies on."""

    id: str
    name: str
    mime: str
    size: int
    chunk_count: int
    page_count: int
    content_hash: str
    embed_model: str
    embed_dim: int
    chunk_target: int
    chunk_overlap: int
    created: str
    ocr_pages: list[int] = field(default_factory=list)  # pages read by OCR
    locations: str = EMPTY_LIST_JSON  # JSON list of its units' names (``formats.decode_units``)
    source_url: str | None = None  # a web page's address
    fetched_at: str | None = None  # when that page was fetched
    parse_health: dict[str, Any] = field(default_factory=dict)  # ``ingest.health``'s findings

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Document:
        """A documents row (``rows.DOCUMENT_COLUMNS``, by name) with its JSON columns decoded;
        the one constructor both backends use."""
        return cls(
            id=str(row["id"]),
            name=str(row["name"]),
            mime=str(row["mime"]),
            size=int(row["size"]),
            chunk_count=int(row["chunk_count"]),
            page_count=int(row["page_count"]),
            content_hash=str(row["content_hash"]),
            embed_model=str(row["embed_model"]),
            embed_dim=int(row["embed_dim"]),
            chunk_target=int(row["chunk_target"]),
            chunk_overlap=int(row["chunk_overlap"]),
            created=str(row["created"]),
            ocr_pages=[int(p) for p in _decoded(row["ocr_pages"], EMPTY_LIST_JSON)],
            locations=str(row["locations"] or EMPTY_LIST_JSON),
            source_url=row["source_url"],
            fetched_at=row["fetched_at"],
            parse_health=dict(_decoded(row["parse_health"], NO_HEALTH_JSON)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form, keys as the API, MCP, CLI and events have always shown them;
        ``locations`` as a list (runs ``[first location, name, number]``), not the stored
        JSON text, which the API and the CLI printed as a string inside their JSON."""
        return {**asdict(self), "locations": _decoded(self.locations, EMPTY_LIST_JSON)}


@dataclass(frozen=True)
class Message:
    """One question or answer of a conversation (``messages``, ``add_exchange``): an answer
    carries the sources it cites, what was searched for it (``query``), its per-sentence
    citation check (``support``, None when unchecked) and its ``status``."""

    id: str
    conversation_id: str
    role: str  # "user" | "assistant"
    content: str
    sources: list[dict[str, Any]]  # events.Source each, as saved
    created: str
    query: str | None  # answers only: the question as searched (a follow-up rewritten)
    support: list[dict[str, Any]] | None  # chat.support.SentenceSupport.as_dict each
    status: str  # ANSWER_COMPLETE or ANSWER_STOPPED

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Message:
        """A messages row (by name) with ``sources`` and ``support`` decoded; the one
        constructor both backends use."""
        support = row["support"]
        return cls(
            id=str(row["id"]),
            conversation_id=str(row["conversation_id"]),
            role=str(row["role"]),
            content=str(row["content"]),
            sources=list(_decoded(row["sources"], EMPTY_LIST_JSON)),
            created=str(row["created"]),
            query=row["query"],
            support=None if support is None else list(_decoded(support, EMPTY_LIST_JSON)),
            status=str(row["status"] or ANSWER_COMPLETE),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (the API's and the CLI's ``message`` lines)."""
        return asdict(self)


@dataclass(frozen=True)
class Conversation:
    """One conversation as ``get_conversation``, ``rename_conversation`` and
    ``create_conversation`` return it, with the document scope its questions search."""

    id: str
    title: str
    created: str
    updated: str  # its last message
    documents: list[str] | None = None  # the ids its questions are limited to; None: all

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Conversation:
        """A conversations row (by name) whose ``documents`` is already the scope in force
        (the backend drops the documents deleted since); the one constructor both use."""
        scope = row["documents"]
        return cls(
            id=str(row["id"]),
            title=str(row["title"]),
            created=str(row["created"]),
            updated=str(row["updated"]),
            documents=None if scope is None else [str(i) for i in scope],
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (the API's conversation, the CLI's ``conversation`` line)."""
        return asdict(self)


@dataclass(frozen=True)
class ConversationSummary:
    """A conversation as the list shows it (``list_conversations``) or a search finds it
    (``search_conversations``): with its message count, and for a search ``matched``."""

    id: str
    title: str
    created: str
    updated: str
    message_count: int
    # a search's first matching message text ("" when only the title matched); None: listed
    matched: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ConversationSummary:
        """A listed (or, with ``matched``, found) conversations row, by name."""
        return cls(
            id=str(row["id"]),
            title=str(row["title"]),
            created=str(row["created"]),
            updated=str(row["updated"]),
            message_count=int(row["message_count"]),
            matched=str(row["matched"] or "") if "matched" in row else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form, keys as the API and CLI have always shown them: ``matched``
        only on search results."""
        out = asdict(self)
        if self.matched is None:
            del out["matched"]
        return out


@dataclass(frozen=True)
class StoredChunk:
    """One stored passage of a document (``document_chunks``), in document order: its chunk
    id, position, text with its character offsets, and pages or location label."""

    id: int  # the chunk id sources and search hits name
    idx: int  # its position in the document
    content: str
    start: int  # character offsets in the document's extracted text
    end: int
    page_start: int
    page_end: int
    location: str  # "p. 3", "slide 2", "sheet Budget, rows 12–40"; "" for a text file

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredChunk:
        """A chunks row (by name); the one constructor both backends use."""
        return cls(
            id=int(row["id"]),
            idx=int(row["idx"]),
            content=str(row["content"]),
            start=int(row["start"]),
            end=int(row["end"]),
            page_start=int(row["page_start"]),
            page_end=int(row["page_end"]),
            location=str(row["location"] or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The plain form, for code that adds keys to a passage row (evaluation's judgments)."""
        return asdict(self)
