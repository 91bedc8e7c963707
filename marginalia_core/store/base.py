"""What the rest of the core asks of a library store, whichever database holds it.

Two implementations: ``store.sqlite.Store`` (the embedded default, one file at ``MARGINALIA_DB``)
and ``store.postgres.PostgresStore`` (``MARGINALIA_DATABASE_URL=postgresql://...``, shared by
several app processes on several machines). ``marginalia_core.store.open_store`` picks one from
the settings; nothing outside ``store/`` names a backend or runs SQL.

``conn`` and ``write()`` (qmark parameters, rows readable by name and by position, on both
backends) serve the portable tables inside ``store/`` only (question sets, jobs, library
settings); tests/test_architecture.py fails on any use of ``.conn`` outside ``store/``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from marginalia_core.config import POSTGRES_SCHEMES
from marginalia_core.store.fingerprint import Fingerprint
from marginalia_core.store.records import (
    Conversation,
    ConversationSummary,
    Document,
    Message,
    StoredChunk,
)


class ChunkRecord(Protocol):
    """What the store keeps of a chunk (``ingest.chunking.Chunk`` is one): the store sits below
    ingestion, so it names the fields rather than importing the chunker."""

    # read-only properties, so a frozen dataclass (``Chunk``) satisfies the protocol
    @property
    def idx(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def page_start(self) -> int: ...
    @property
    def page_end(self) -> int: ...
    @property
    def location(self) -> str: ...


@runtime_checkable
class LexicalSource(Protocol):
    """Full-text side of a store, as ``retrieval.lexical`` uses it. ``terms`` are already
    lower-cased, stopword-free tokens (``lexical.query_terms``); scores are larger-is-better."""

    def bm25(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        chunk_ids: Sequence[int] | None = None,
        require_all: bool = False,
    ) -> list[tuple[int, float]]: ...

    def term_chunk_counts(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]: ...

    def chunks_containing(self, term: str, chunk_ids: Sequence[int]) -> list[int]: ...


@runtime_checkable
class LibraryStore(LexicalSource, Protocol):
    """Documents, chunks with vectors, lexical search, conversations, messages, the embedding
    cache, ingestion jobs and the library's applied settings."""

    backend: str  # "sqlite" | "postgresql"
    path: str  # the SQLite file, or ":memory:" for a server database (no sidecar files beside it)

    @property
    def location(self) -> str: ...  # where the library lives, safe to show (no password)

    @property
    def conn(self) -> Any: ...  # inside store/ only

    def write(self) -> AbstractContextManager[Any]: ...  # inside store/ only

    def close(self) -> None: ...

    # change counters: in-memory indexes reload when these move (any process)
    def generation(self) -> int: ...

    def counters(self) -> tuple[int, int]: ...

    # documents
    def find_by_hash(self, content_hash: str) -> Document | None: ...

    def add_document(
        self,
        *,
        name: str,
        mime: str,
        size: int,
        content_hash: str,
        embed_model: str,
        embed_dim: int,
        chunks: Sequence[ChunkRecord],
        embeddings: np.ndarray,
        page_count: int = 1,
        chunk_target: int,
        chunk_overlap: int,
        text: str = "",
        page_starts: Sequence[int] = (0,),
        replace_id: str | None = None,
        document_id: str | None = None,
        original: bytes | None = None,
        ocr_pages: Sequence[int] = (),
        locations: str = "[]",
        source_url: str | None = None,
        fetched_at: str | None = None,
        parse_health: Mapping[str, Any] | None = None,
    ) -> Document: ...

    def near_duplicates(
        self, print_: Fingerprint, *, exclude: str | None = None
    ) -> list[tuple[Document, float]]: ...

    def document_file(self, document_id: str) -> bytes | None: ...

    def list_documents(self) -> list[Document]: ...

    def get_document(self, document_id: str) -> Document: ...

    def delete_document(self, document_id: str) -> bool: ...

    def document_source(self, document_id: str) -> tuple[str, list[int]]: ...

    # chunks and vectors
    def embedder_counts(self) -> dict[tuple[str, int], int]: ...

    def load_vectors(
        self, embed_model: str, embed_dim: int, *, after_id: int = 0
    ) -> tuple[tuple[int, int], np.ndarray, np.ndarray]: ...

    def chunks_by_ids(self, chunk_ids: Sequence[int]) -> dict[int, dict[str, Any]]: ...

    def vectors_by_ids(self, chunk_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]: ...

    def chunk_count(self, embed_model: str, embed_dim: int) -> int: ...

    def vector_ids(self, embed_model: str, embed_dim: int) -> tuple[tuple[int, int], np.ndarray]: ...

    def vector_pages(
        self, embed_model: str, embed_dim: int, *, after_id: int = 0, page_rows: int = ...
    ) -> Iterator[tuple[tuple[int, int], np.ndarray, np.ndarray]]: ...

    def library_token(self) -> int: ...

    def document_chunks(self, document_id: str) -> list[StoredChunk]: ...

    def chunk_ids_of_documents(self, document_ids: Sequence[str]) -> list[int]: ...

    def missing_documents(self, document_ids: Sequence[str]) -> list[str]: ...

    def integrity_report(self) -> dict[str, Any]: ...

    # embedding cache: vectors by (embedder key, text_hash(text))
    def cached_embeddings(
        self, embedder: str, hashes: Sequence[str]
    ) -> dict[str, np.ndarray]: ...

    def cache_embeddings(self, embedder: str, vectors: Mapping[str, np.ndarray]) -> None: ...

    def chunk_texts_and_vectors(
        self, embed_model: str, embed_dim: int
    ) -> Iterator[tuple[str, np.ndarray]]: ...

    # conversations and messages
    def create_conversation(self, title: str) -> Conversation: ...

    def list_conversations(self) -> list[ConversationSummary]: ...

    def get_conversation(self, conversation_id: str) -> Conversation: ...

    def set_conversation_documents(
        self, conversation_id: str, document_ids: Sequence[str] | None
    ) -> None: ...

    def rename_conversation(self, conversation_id: str, title: str) -> Conversation: ...

    def search_conversations(self, text: str, limit: int = 50) -> list[ConversationSummary]: ...

    def delete_conversation(self, conversation_id: str) -> bool: ...

    def add_message(
        self, conversation_id: str, role: str, content: str,
        sources: Sequence[dict[str, Any]] = (),
    ) -> Message: ...

    def add_exchange(
        self, conversation_id: str, title: str, question: str, answer: str,
        sources: Sequence[dict[str, Any]], *, query: str | None = None,
        documents: Any = ...,  # a list of ids, None (all) or rows.KEEP (leave as it is)
        support: Sequence[dict[str, Any]] | None = None,
        status: str = "complete",  # or "stopped": the reader stopped the answer
    ) -> tuple[Message, Message]: ...

    def messages(self, conversation_id: str, limit: int | None = None) -> list[Message]: ...

    # ingestion jobs (store.job_table)
    def list_jobs(self, *, ended_limit: int) -> list[dict[str, Any]]: ...

    def get_job(self, job_id: str) -> dict[str, Any] | None: ...

    def running_jobs(self) -> list[dict[str, Any]]: ...

    def job_payload(self, job_id: str, owner: str) -> tuple[str, str | None, bytes] | None: ...

    def job_cancel_requested(self, job_id: str) -> bool: ...

    def insert_jobs(self, jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]: ...

    def cancel_job(self, job_id: str, message: str) -> bool: ...

    def requeue_jobs(
        self, job_id: str | None, requeueable_reasons: Sequence[str],
        before_commit: Callable[[str], None] | None = None,
    ) -> list[str]: ...

    def clear_finished_jobs(
        self, statuses: Sequence[str], batch_id: str | None = None
    ) -> int: ...

    def interrupt_job(
        self, job_id: str, message: str, still_dead: Callable[[str | None, str | None], bool]
    ) -> bool: ...

    def claim_job(self, owner: str, *, candidates: int) -> str | None: ...

    def record_job_progress(self, job_id: str, values: dict[str, Any]) -> None: ...

    def finish_job(
        self, job_id: str, owner: str, status: str, values: dict[str, Any], *, keep_data: bool
    ) -> None: ...

    # settings "Apply to Chat" saved for this library (store.library_settings)
    def library_settings(self) -> dict[str, Any]: ...

    def save_library_settings(self, values: dict[str, Any]) -> None: ...

    def library_value(self, key: str) -> Any: ...

    def set_library_value(self, key: str, value: Any) -> None: ...


@runtime_checkable
class DatabaseRanking(Protocol):
    """A store that ranks vectors itself (PostgreSQL + pgvector's HNSW): the retriever asks it
    for the top k instead of holding the vectors in the process."""

    def nearest(
        self, embed_model: str, embed_dim: int, query_vector: np.ndarray, *, k: int = 10,
        exact: bool = False, ef_search: int | None = None,
        documents: Sequence[str] | None = None,
    ) -> list[tuple[int, float]]: ...

    def cosines(
        self, embed_model: str, embed_dim: int, query_vector: np.ndarray,
        chunk_ids: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def chunk_count(self, embed_model: str, embed_dim: int) -> int: ...


def text_hash(text: str) -> str:
    """The embedding cache's key for a text: SHA-256 of its UTF-8 bytes, hex (PostgreSQL's
    ``sha256`` gives the same, so either side may compute it)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(POSTGRES_SCHEMES)
