"""The one API the pages, the CLI and the tests use: settings wired to the store, the chosen
providers and the engines once, and every operation a person can ask for (ingest, re-index,
delete, search, score table, ask, conversations) as a method returning typed results or an
event iterator. Pages lay the results out; the CLI prints them; neither re-implements them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from marginalia_core import events
from marginalia_core.config import RETRIEVAL_MODES, RetrievalConfig, Settings, load_settings
from marginalia_core.errors import EmbedderMismatchError, InvalidInputError, NotFoundError
from marginalia_core.ingest import formats, pipeline
from marginalia_core.ingest.chunking import Chunk, chunk_stats, chunk_text, effective_overlap
from marginalia_core.ingest.jobs import Job, JobQueue, JobWorker, Upload
from marginalia_core.ingest.page_images import PageImage, PageRenderer
from marginalia_core.providers.embeddings import Embedder, get_embedder
from marginalia_core.retrieval.rerank import reranker_class as get_reranker_class
from marginalia_core.retrieval.retriever import Hit, Retriever
from marginalia_core.store import open_store
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.records import Conversation, ConversationSummary, Document, Message

if TYPE_CHECKING:
    from marginalia_core.chat.engine import ChatEngine
    from marginalia_core.lab import Tuning
    from marginalia_core.providers.answerers.base import Answerer
    from marginalia_core.providers.local_servers import LocalServer

Reindex = Literal["stale", "all"]
MAX_TITLE_CHARS = 120
MAX_ROW_ID = 2**63 - 1  # past it a chunk id cannot be a row (SQLite and PostgreSQL: OverflowError)
# What "Apply to Chat" saves per library (migration m010): the RetrievalConfig fields a lab
# configuration fixes. Environment variables stay the defaults underneath.
APPLIED_FIELDS = RetrievalConfig.names()


LOCAL_MODEL_KEY = "local_model"  # the library setting that remembers the sidebar's choice


def with_local_model(settings: Settings, local: dict[str, str] | None) -> Settings:
    """``settings`` answering with a local model server's model (None: unchanged). A configured
    key goes only to the server it was configured for."""
    if not local:
        return settings
    from marginalia_core.providers.local_servers import normalize

    same = bool(settings.openai_base_url) and normalize(settings.openai_base_url or "") == \
        local["server"]
    return replace(settings, answerer="openai", openai_base_url=local["server"],
                   chat_model=local["model"],
                   openai_api_key=settings.openai_api_key if same else None)


def _answering(settings: Settings) -> tuple[Any, ...]:
    return (settings.answerer_name, settings.openai_base_url, settings.chat_model,
            settings.openai_api_key)


@dataclass(frozen=True)
class ChunkPreview:
    """How a document would split with other chunk settings (the Inspector's chunking lab)."""

    chunks: list[Chunk]
    stats: dict[str, float]
    target: int
    overlap: int  # as applied: an overlap above half the target is clamped
    unchanged: bool  # the document is already indexed with these settings


class Workspace:
    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None):
        """``embedder``: an already loaded one to share (the app keeps one per embedding
        setting, so choosing another chat model does not load the embedding model again)."""
        self.defaults = settings or load_settings()  # environment / secrets / built-in
        self._settings: Settings | None = None
        self._mark: str | None = None
        self._lock = threading.Lock()
        if embedder is not None:
            self.__dict__["embedder"] = embedder
        self._worker: JobWorker | None = None

    # ------------------------------------------------------------------ wiring

    @property
    def settings(self) -> Settings:
        """The defaults with the retrieval settings applied to this library on top; read
        again when another Workspace (process, session) applied new ones."""
        mark = self._applied_mark()
        if self._settings is None or mark != self._mark:
            self._mark = mark
            merged = self.defaults.with_overrides(**self.applied_settings())
            self._use(with_local_model(merged, self.local_model()))
        assert self._settings is not None  # _use set it
        return self._settings

    def _applied_mark(self) -> str | None:
        """The applied settings' whole content (a handful of short rows): cheap to compare."""
        saved = self.store.library_settings()
        return json.dumps(saved, sort_keys=True) if saved else None

    @cached_property
    def store(self) -> LibraryStore:
        """SQLite at ``MARGINALIA_DB``, or PostgreSQL when ``MARGINALIA_DATABASE_URL`` is set."""
        return open_store(self.defaults)

    def applied_settings(self) -> dict[str, Any]:
        """The retrieval settings "Apply to Chat" saved for this library (only the ones it
        fixes), by ``RetrievalConfig`` field name (older saved names read as their field)."""
        out: dict[str, Any] = {}
        for key, value in self.store.library_settings().items():
            name = RetrievalConfig.field_name(key)
            if name is not None and value is not None:
                out[name] = value
        return out

    def tuned_settings(self) -> dict[str, tuple[Any, Any]]:
        """The applied retrieval settings that differ from the defaults: field -> (applied,
        default). Chat says so when any is in force."""
        defaults = self.defaults
        return {k: (v, getattr(defaults, k, None)) for k, v in self.applied_settings().items()
                if v != getattr(defaults, k, None)}

    def apply_settings(self, values: dict[str, Any]) -> Iterator[events.IngestEvent]:
        """Save retrieval settings for this library, so Chat (and new uploads) use them;
        re-index, one transaction each, the documents whose chunking differs (their events).
        An empty ``values`` restores the defaults."""
        unknown = sorted(k for k in values if RetrievalConfig.field_name(k) is None)
        if unknown:
            raise ValueError(f"not a retrieval setting: {', '.join(unknown)}")
        kept = {RetrievalConfig.field_name(k) or k: v for k, v in values.items() if v is not None}
        merged = self.defaults.with_overrides(**kept)
        if merged.retrieval.mode not in RETRIEVAL_MODES:
            raise ValueError(f"retrieval mode must be one of {', '.join(RETRIEVAL_MODES)}")
        get_reranker_class(merged.retrieval.reranker)  # an unknown name is refused here
        self.store.save_library_settings(kept)
        self._mark = self._applied_mark()
        self._use(with_local_model(merged, self.local_model()))  # the sidebar's choice stays
        config = merged.retrieval
        target, overlap = config.chunk_target, effective_overlap(
            config.chunk_target, config.chunk_overlap)
        differ = [d.id for d in self.documents()
                  if (d.chunk_target, d.chunk_overlap) != (target, overlap)]
        return self.reindex_many(differ, target=target, overlap=overlap)

    def _use(self, settings: Settings) -> None:
        before, self._settings = self._settings, settings
        if before is not None and _answering(before) != _answering(settings):
            # another answerer (the sidebar's local model server): built again on next use
            self.__dict__.pop("answerer", None)
            self.__dict__.pop("chat", None)
        for name in ("retriever", "chat"):
            if name in self.__dict__:
                self.__dict__[name].settings = settings

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

    def retrieval_tuning(self) -> Tuning:
        """Whether Chat retrieves with settings applied in the Inspector rather than the
        defaults, and the saved configuration they match (Chat's "tuned settings" note)."""
        from marginalia_core.lab import RetrievalLab

        self.settings  # noqa: B018 - picks up settings applied elsewhere
        return RetrievalLab(self).tuning()

    def mode_summary(self) -> dict[str, str]:
        """What the UI and CLI show as the active mode; never includes a key.

        ``server`` is the OpenAI-compatible server's address when one is in use ("" otherwise,
        or when it is not configured); ``chat_model`` the answer model ("" for the extractive one),
        ``embed_model`` the server-side embedding model."""
        from marginalia_core.config import DEFAULT_CHAT_MODEL
        from marginalia_core.errors import MarginaliaError
        from marginalia_core.providers import openai_client

        s = self.settings
        names = {s.embedder_name, s.answerer_name}
        if "openai" in names:
            mode = "Model server"
        elif "gemini" in names:
            mode = "Gemini"
        else:
            mode = "Offline"
        server = ""
        if "openai" in names:
            try:
                server = openai_client.server_label(openai_client.base_url(s))
            except MarginaliaError:
                server = ""
        model = {"gemini": s.chat_model or DEFAULT_CHAT_MODEL, "openai": s.chat_model or ""}.get(
            s.answerer_name, ""
        )
        return {
            "mode": mode,
            "embedder": s.embedder_name,
            "answerer": s.answerer_name,
            "chat_model": model,
            "server": server,
            "embed_model": (s.embed_model or "") if s.embedder_name == "openai" else "",
            "retrieval": s.retrieval.mode,
            "db": self.store.location if s.database_url else s.db_path,
        }

    def list_models(self) -> list[str]:
        """Model ids the OpenAI-compatible server offers (``GET /v1/models``), for a model
        picker; ``ModelServerError`` with a plain message when it offers none or is down."""
        from marginalia_core.providers import openai_client

        return openai_client.list_models(self.settings)

    # ------------------------------------------------------------------ local model servers

    def local_servers(self) -> list[LocalServer]:
        """OpenAI-compatible servers running on this machine, with their models, probed now
        (the usual ports, ``OPENAI_BASE_URL``, ``MARGINALIA_LOCAL_SERVERS``): the sidebar's."""
        from marginalia_core.providers import local_servers

        s = self.defaults
        extra = [u for u in (s.local_servers or "").split(",") if u.strip()]
        return local_servers.discover(
            local_servers.candidates(s.openai_base_url, s.openai_api_key, extra)
        )

    def local_model(self) -> dict[str, str] | None:
        """The local model server this library answers with (``{"server", "model",
        "label"}``), or None: the configured answerer."""
        value = self.store.library_value(LOCAL_MODEL_KEY)
        if isinstance(value, dict) and value.get("server") and value.get("model"):
            return {k: str(value.get(k) or "") for k in ("server", "model", "label")}
        return None

    def use_local_model(self, server: str | None, model: str = "", label: str = "") -> None:
        """Answer this library's questions with ``model`` on the OpenAI-compatible ``server``
        from now on (remembered with the library, for every session); ``server`` None: back to
        the configured answerer. Takes effect at the next question, no restart."""
        from marginalia_core.providers.local_servers import normalize

        if server is not None and not model.strip():
            raise InvalidInputError("Choose one of the server's models.")
        value = None if server is None else {
            "server": normalize(server), "model": model.strip(), "label": label}
        self.store.set_library_value(LOCAL_MODEL_KEY, value)

    def close(self) -> None:
        self.stop_worker()
        if "store" in self.__dict__:
            self.store.close()

    # ------------------------------------------------------------------ documents

    def documents(self) -> list[Document]:
        """Indexed documents, newest first."""
        return self.store.list_documents()

    def document(self, document_id: str) -> Document:
        return self.store.get_document(document_id)

    def ingest(
        self, name: str, data: bytes, *, mime: str | None = None, password: str | None = None
    ) -> Iterator[events.IngestEvent]:
        """Index one file's bytes: ``stage`` events, then ``done`` or ``error``."""
        return pipeline.ingest_bytes(
            self.store, self.embedder, self.settings, name, data, mime=mime, password=password
        )

    def ingest_url(self, url: str) -> Iterator[events.IngestEvent]:
        """Fetch a web page (this explicit request is the only time one is fetched) and index
        it under its final address: ``stage`` ``fetching``, then as :meth:`ingest`."""
        return pipeline.ingest_url(self.store, self.embedder, self.settings, url)

    def refresh(self, document_id: str) -> Iterator[events.IngestEvent]:
        """Fetch a web page document again; replaced (same id) if it changed."""
        return pipeline.refresh_document(self.store, self.embedder, self.settings, document_id)

    def ingest_path(
        self, path: str | Path, *, password: str | None = None
    ) -> Iterator[events.IngestEvent]:
        """Index a file on disk (an oversize one is refused before it is read)."""
        return pipeline.ingest_path(
            self.store, self.embedder, self.settings, path, password=password
        )

    # ------------------------------------------------------------------ ingestion jobs

    @cached_property
    def job_queue(self) -> JobQueue:
        """The database's ingestion jobs; creating it marks jobs a dead process left running
        as interrupted."""
        return JobQueue(self.store, self.settings, lambda: self.embedder)

    def start_worker(self) -> JobWorker:
        """Start this Workspace's background worker (once; the app calls it from the cached
        Workspace, so there is one per process whatever the number of browser sessions)."""
        with self._lock:
            if self._worker is None:
                self._worker = JobWorker(self.job_queue)
        return self._worker.start()

    def stop_worker(self) -> None:
        """Stop the worker; a job it was running is marked interrupted and can be resumed."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def submit(
        self, uploads: Iterable[Upload | tuple[str, bytes] | tuple[str, bytes, str | None]],
        *, password: str | None = None,
    ) -> list[Job]:
        """Queue files for the background worker as one batch; returns their jobs at once.
        ``password`` (for encrypted PDFs) is kept in memory only."""
        files = [u if isinstance(u, Upload) else Upload(*u) for u in uploads]
        jobs = self.job_queue.submit(files, password=password)
        if self._worker is not None:
            self._worker.wake()
        return jobs

    def jobs(self) -> list[Job]:
        """Queued, running and interrupted jobs (in run order), then recent finished ones."""
        return self.job_queue.jobs()

    def job(self, job_id: str) -> Job:
        return self.job_queue.job(job_id)

    def cancel(self, job_id: str) -> bool:
        """Cancel a job (a running one stops at its next page or batch, saving nothing)."""
        return self.job_queue.cancel(job_id)

    def resume(
        self, job_id: str | None = None, *, password: str | None = None, replace: bool = False
    ) -> list[Job]:
        """Queue again an interrupted job (all of them without ``job_id``), an encrypted PDF
        that was refused, with its ``password``, or with ``replace`` a near-duplicate that is
        to replace the document it matches."""
        jobs = self.job_queue.resume(job_id, password=password, replace=replace)
        if self._worker is not None:
            self._worker.wake()
        return jobs

    def clear_finished_jobs(self, batch_id: str | None = None) -> int:
        return self.job_queue.clear_finished(batch_id)

    def ingest_files(
        self, paths: Iterable[str | Path], *, password: str | None = None
    ) -> Iterator[events.IngestEvent]:
        """Index files on disk now, in this thread, as recorded jobs (the CLI): the same job code
        and events as the background worker."""
        for path in paths:
            name, data, refused = pipeline.read_path(path, self.settings)
            if refused is not None or data is None:
                yield refused or events.error(f"Cannot read {name}.", "unreadable", file=name)
                continue
            yield from self.job_queue.run_inline([Upload(name, data)], password=password)

    def ingest_uploads(
        self, uploads: Iterable[Upload], *, password: str | None = None
    ) -> Iterator[events.IngestEvent]:
        """Index uploaded files now, in this thread, as recorded jobs (the HTTP API), one after
        the other: ``uploads`` may read each file lazily, so one file's bytes are held at once."""
        for upload in uploads:
            yield from self.job_queue.run_inline([upload], password=password)

    def is_searchable(self, document: Document) -> bool:
        """Indexed by the active embedder, so it takes part in search."""
        return self.retriever.is_searchable(document)

    def stale_documents(self) -> list[Document]:
        """Documents indexed by another embedder: the ones a re-index brings back to search."""
        return self.retriever.stale_documents()

    def mismatch(self) -> EmbedderMismatchError | None:
        """Why some documents are left out of search, or None."""
        return self.retriever.mismatch()

    def reindex(
        self, document_id: str, *, target: int | None = None, overlap: int | None = None
    ) -> Iterator[events.IngestEvent]:
        """Re-chunk and re-embed one document with the active embedder, replacing it in one
        transaction. Without ``target``/``overlap`` the document keeps its own chunking."""
        return pipeline.reindex_document(
            self.store, self.embedder, self.settings, document_id, target=target, overlap=overlap
        )

    def reindex_many(
        self,
        which: Reindex | Iterable[str] = "stale",
        *,
        target: int | None = None,
        overlap: int | None = None,
    ) -> Iterator[events.IngestEvent]:
        """Re-index several documents (``"stale"``: those another embedder indexed; ``"all"``;
        or the given ids), one transaction each; the events of each in turn."""
        if which == "stale":
            ids = [d.id for d in self.stale_documents()]
        elif which == "all":
            ids = [d.id for d in self.documents()]
        else:
            ids = list(which)
        for document_id in ids:
            yield from self.reindex(document_id, target=target, overlap=overlap)

    def delete_document(self, document_id: str) -> bool:
        """Remove a document and its chunks; False if there was none."""
        return self.store.delete_document(document_id)

    def chunk_preview(
        self, document_id: str, *, target: int, overlap: int
    ) -> ChunkPreview:
        """How a stored document would split with other settings, without changing it."""
        doc = self.store.get_document(document_id)
        text, page_starts = self.store.document_source(document_id)
        chunks = chunk_text(text, target=target, overlap=overlap, page_starts=page_starts)
        used = effective_overlap(target, overlap)
        return ChunkPreview(
            chunks=chunks,
            stats=chunk_stats(chunks),
            target=target,
            overlap=used,
            unchanged=target == doc.chunk_target and used == doc.chunk_overlap,
        )

    @cached_property
    def page_renderer(self) -> PageRenderer:
        return PageRenderer()

    def original(self, document_id: str) -> bytes | None:
        """The file as it was uploaded (or fetched), or None for a document indexed before
        originals were kept (before m007 for PDFs, before 2026-12-06 for the other formats)."""
        return self.store.document_file(document_id)

    def page_image(
        self, document_id: str, pages: Iterable[int], sentences: Iterable[str] = ()
    ) -> PageImage | None:
        """The first of ``pages`` of a stored PDF that shows a cited sentence, rendered with the
        sentences highlighted; None for a document without pages (its original, if kept, is
        for download) or a PDF indexed before page views existed. Raises ``PageRenderError`` when
        the page cannot be rendered."""
        try:
            mime = self.document(document_id).mime
        except NotFoundError:
            return None
        if formats.by_mime(mime).renders != "pdf":
            return None  # a Word file's original is kept for download, not drawn as pages
        data = self.store.document_file(document_id)
        if data is None:
            return None
        return self.page_renderer.render(document_id, data, list(pages), list(sentences))

    # ------------------------------------------------------------------ retrieval

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        threshold: float | None = None,
        mode: str | None = None,
        alpha: float | None = None,
        documents: Iterable[str] | None = None,
    ) -> list[Hit]:
        """The passages an answer would be given, best first (``alpha``: hybrid weight of the
        cosine, None = the library's setting; ``documents``: only those)."""
        self.settings  # noqa: B018 - picks up settings applied elsewhere
        return self.retriever.search(
            query, k=k, threshold=threshold, mode=mode, alpha=alpha,
            documents=None if documents is None else list(documents),
        )

    def search_result(
        self, query: str, *, k: int | None = None, mode: str | None = None,
        documents: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """One query's ``hits`` record as the CLI prints it and the API returns it: the query,
        the mode and threshold in force, and the hits numbered as sources (``documents``: only
        those; an unknown id is refused with ``NotFoundError``)."""
        if mode is not None and mode not in RETRIEVAL_MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(RETRIEVAL_MODES)}")
        query = events.well_formed(query)
        scope = self.chat.checked_documents(list(documents)) if documents else None
        hits = self.search(query, k=k, mode=mode, documents=scope)
        return {
            "type": "hits",
            "query": query,
            "mode": mode or self.settings.retrieval.mode,
            # the cosine floor in force; lexical mode has none (its hits' cosines can be lower)
            "threshold": None if (mode or self.settings.retrieval.mode) == "lexical"
            else self.retriever.threshold,
            "hits": self.sources(hits),
        }

    def passage(self, chunk_id: int) -> dict[str, Any]:
        """One stored passage by its chunk id (a source's ``chunk_id``): its document, index,
        pages and full text; ``NotFoundError`` when there is none (its document was deleted)."""
        row = (self.store.chunks_by_ids([int(chunk_id)]).get(int(chunk_id))
               if 0 < int(chunk_id) <= MAX_ROW_ID else None)
        if row is None:
            raise NotFoundError(f"No passage with chunk id {chunk_id}.")
        return {
            "chunk_id": row["id"], "document_id": row["document_id"],
            "document_name": row["document_name"], "idx": row["idx"],
            "page": row["page_start"], "page_end": row["page_end"], "content": row["content"],
            "ocr": bool(row.get("ocr")),
        }

    def sources(self, hits: list[Hit]) -> list[events.Source]:
        """Hits numbered from 1 as the sources of an answer."""
        return [hit.as_source(n) for n, hit in enumerate(hits, start=1)]

    def score_table(self, query: str, *, threshold: float | None = None) -> list[dict[str, Any]]:
        """Every searchable chunk's scores for ``query``, best first (the Inspector)."""
        return self.retriever.score_table(query, threshold=threshold)

    # ------------------------------------------------------------------ chat

    def ask(
        self,
        question: str,
        conversation_id: str | None = None,
        *,
        k: int | None = None,
        threshold: float | None = None,
        documents: Iterable[str] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[events.ChatEvent]:
        """A cited answer as events: ``meta``, ``token``..., then ``done`` or ``error``,
        retrieved with the library's applied settings (also those applied elsewhere).

        ``documents`` limits the search to those document ids and is kept on the conversation
        for its next questions (an empty list: all documents again); None uses the
        conversation's own choice (all, for a new conversation). ``meta`` carries the
        ``query`` actually searched and the ``documents`` searched; ``done`` the final
        ``answer`` and ``sources``, renumbered in the order the answer first cites them (the
        tokens carry that numbering already). Setting ``stop`` ends the answer early, saved
        as far as it got with ``status="stopped"``."""
        self.settings  # noqa: B018 - picks up settings applied elsewhere
        return self.chat.ask(
            question, conversation_id, k=k, threshold=threshold,
            documents=None if documents is None else list(documents), stop=stop,
        )

    @staticmethod
    def new_conversation_id() -> str:
        """An id for a conversation not stored yet: ``ask`` starts it under this id with its
        first answer, so a page can put it in its address before the answer is written."""
        from marginalia_core.chat.engine import new_conversation_id

        return new_conversation_id()

    def conversation_documents(self, conversation_id: str) -> list[str] | None:
        """The document ids a conversation is limited to, or None for all documents (a
        chosen document deleted since drops out; when none is left, all documents)."""
        return self.store.get_conversation(conversation_id).documents

    def set_conversation_documents(
        self, conversation_id: str, documents: Iterable[str] | None
    ) -> list[str] | None:
        """Limit a stored conversation to some documents (None or empty: all). Unknown ids
        are refused (``NotFoundError``), nothing changed. For a conversation not stored yet,
        pass ``documents`` to ``ask``. Returns the scope now in force."""
        ids = self.chat.checked_documents(list(documents or ()))
        self.store.set_conversation_documents(conversation_id, ids)
        return self.conversation_documents(conversation_id)

    def conversations(self) -> list[ConversationSummary]:
        """Conversations, most recently updated first."""
        return self.store.list_conversations()

    def conversation(self, conversation_id: str) -> Conversation:
        return self.store.get_conversation(conversation_id)

    def has_conversation(self, conversation_id: str | None) -> bool:
        if not conversation_id:
            return False
        try:
            self.store.get_conversation(conversation_id)
        except NotFoundError:
            return False
        return True

    def messages(self, conversation_id: str) -> list[Message]:
        """A conversation's messages, oldest first, each assistant message with its sources."""
        return self.store.messages(conversation_id)

    def missing_documents(self, document_ids: Iterable[str]) -> set[str]:
        """Those of ``document_ids`` no longer in the library: a saved answer's sources keep
        the passages of a document deleted since, and a reader should be told so."""
        ids = list(dict.fromkeys(i for i in document_ids if i))
        return set(self.store.missing_documents(ids)) if ids else set()

    def delete_conversation(self, conversation_id: str) -> bool:
        return self.store.delete_conversation(conversation_id)

    def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        """A new title (whitespace collapsed, at most ``MAX_TITLE_CHARS``); a blank one is
        refused with ``InvalidInputError``."""
        clean = " ".join(str(title).split())
        if not clean:
            raise InvalidInputError("A conversation needs a title.")
        return self.store.rename_conversation(conversation_id, clean[:MAX_TITLE_CHARS])

    def search_conversations(self, text: str) -> list[ConversationSummary]:
        """Conversations whose title or messages contain ``text``; all of them for blank text."""
        text = " ".join(str(text).split())
        if not text:
            return [replace(c, matched="") for c in self.conversations()]
        return self.store.search_conversations(text)

    def export_conversation(self, conversation_id: str) -> tuple[str, str]:
        """(file name, Markdown) of a conversation with the passages its answers cited."""
        from marginalia_core.chat.export import conversation_markdown, export_filename

        conversation = self.store.get_conversation(conversation_id)
        markdown = conversation_markdown(conversation, self.store.messages(conversation_id))
        return export_filename(conversation), markdown
