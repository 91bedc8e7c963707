"""Ingestion as a stream of events: extract -> chunk -> embed -> store, one file at a time.

Nothing is written until every chunk is embedded; the document and its chunks then go in one
transaction, so a failure (or a kill) at any point leaves the database as it was. Expected
failures become an ``error`` event with a plain reason; one bad file never stops a batch.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from marginalia_core import events
from marginalia_core.config import Settings
from marginalia_core.errors import MarginaliaError, NearDuplicateError, TooLargeError
from marginalia_core.ingest import formats, web
from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.ingest.embed_cache import EmbeddingCache
from marginalia_core.ingest.extraction import Extracted, Unit, finish_pages, join_pages
from marginalia_core.ingest.formats import extract
from marginalia_core.ingest.health import parse_health
from marginalia_core.ingest.relay import Relay
from marginalia_core.providers.embeddings.base import Embedder
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.fingerprint import fingerprint
from marginalia_core.store.records import Document

log = logging.getLogger(__name__)


# While a PDF is read, its text so far is cleaned and re-chunked every this many new characters
# and the chunks that can no longer change are embedded on another thread: reading (Python,
# holds the GIL) and embedding (ONNX / HTTP, releases it) overlap.
EARLY_EMBED_EVERY_CHARS = 16_000
# Each look ahead whose passages the embedding cache held entirely doubles the distance to the
# next: a re-saved copy of an indexed book is read without re-cleaning and re-chunking its
# growing text every 16,000 characters (quadratic in its length, most of its cost), and a look
# ahead that finds new text brings the distance back to EARLY_EMBED_EVERY_CHARS.
CACHED_BACKOFF = 2
# a chunk is settled once the text runs this many targets past its start (the chunker only
# looks one window ahead) ...
SETTLED_TARGETS = 2
# ... and it ends before the last this many pages read: a running head is recognised (and
# removed from every page) once it has repeated on 3 pages (cleanup.REPEAT_MIN_PAGES; on
# alternate pages when a book alternates two heads: 5 pages), a word broken at a page's end is
# joined when the next page comes, so the recent pages' text may still change.
SETTLED_LAG_PAGES = 5
# The final pass embeds in slices of at least this many texts (and at least one round of the
# embedder's concurrent batches), caching each slice as it is done, so an interrupted job
# keeps what it embedded; the local embedder sorts each slice by length to pad less.
CACHE_SLICE = 64


class _EarlyEmbeddings:
    """Embeds the settled chunks of a growing text on a background thread, keyed by chunk text.

    Three threads meet here: the page reader calls ``add_page`` (settled chunk texts go to
    ``candidates``); the consuming thread calls ``pump`` between pages (candidates found in the
    embedding cache are taken from it, the rest go to the worker; the worker's vectors are
    written to the cache); the worker embeds. The final pass chunks the whole cleaned text as
    always and takes the vectors whose chunk text it finds here, so the stored result is the
    same as without overlap; a chunk that came out differently is simply embedded then.
    """

    def __init__(self, embedder: Embedder, cache: EmbeddingCache, target: int, overlap: int):
        self.embedder = embedder
        self.cache = cache
        self.target = target
        self.overlap = overlap
        self.pages: list[str] = []
        self.pending = 0
        self.every = EARLY_EMBED_EVERY_CHARS  # written by the consuming thread (``pump``)
        self.seen: set[str] = set()  # reading thread: texts handed over
        self.candidates: queue.Queue[list[str]] = queue.Queue()
        self.vectors: dict[str, np.ndarray] = {}  # consuming thread: cached or embedded here
        self.embedded: set[str] = set()  # consuming thread: texts this job embedded
        self.batches: queue.Queue[list[str] | None] = queue.Queue()
        self.results: queue.Queue[tuple[list[str], np.ndarray] | None] = queue.Queue()
        self.stop = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self._work, name="marginalia-early-embed",
                                       daemon=True)
        self.thread.start()

    def add_page(self, text: str) -> None:
        """On the reading thread, after each page (its text before the cross-page cleanup)."""
        self.pages.append(text)
        self.pending += len(text)
        if self.pending < self.every or self.stop.is_set():
            return
        self.pending = 0
        settled = len(self.pages) - SETTLED_LAG_PAGES
        if settled <= 0:
            return
        full, starts = join_pages(finish_pages(self.pages))
        horizon = starts[settled] - SETTLED_TARGETS * self.target
        batch = [c.text for c in chunk_text(full, target=self.target, overlap=self.overlap)
                 if c.end <= horizon and c.text not in self.seen]
        if batch:
            self.seen.update(batch)
            self.candidates.put(batch)

    def pump(self) -> None:
        """On the consuming thread: hand new candidates to the worker (cached ones are taken
        from the cache) and keep the vectors the worker finished."""
        while True:
            try:
                batch = self.candidates.get_nowait()
            except queue.Empty:
                break
            hits = self.cache.lookup(batch)
            self.vectors.update(hits)
            misses = [t for t in batch if t not in hits]
            self.every = (EARLY_EMBED_EVERY_CHARS if misses
                          else self.every * CACHED_BACKOFF)
            if misses and not self.stop.is_set():
                self.batches.put(misses)
        while True:
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self.results.put(None)  # the end marker stays for ``finish``
                break
            self._keep(*item)

    def _keep(self, texts: list[str], vectors: np.ndarray) -> None:
        new = dict(zip(texts, vectors, strict=True))
        self.cache.add(new)
        self.vectors.update(new)
        self.embedded.update(texts)

    def _work(self) -> None:
        while (batch := self.batches.get()) is not None:
            if self.stop.is_set():
                continue
            try:
                vectors = self.embedder.embed_documents(batch)
            except Exception:  # the final pass embeds these again and reports any failure
                log.debug("early embedding failed; the final pass will retry", exc_info=True)
                self.stop.set()
                continue
            self.results.put((batch, vectors))
        self.results.put(None)

    def finish(
        self, file: str, wanted: set[str], progress: Callable[[int], events.IngestEvent | None],
        checkpoint: Checkpoint | None = None,
    ) -> Generator[events.IngestEvent, None, dict[str, np.ndarray]]:
        """Wait for the batches already handed over; after each, ``progress(n)`` with the
        number of ``wanted`` texts embedded so far, yielded when it makes an event. Returns
        the vectors by chunk text."""
        self.pump()
        self.closed = True
        self.batches.put(None)
        try:
            while (item := self.results.get()) is not None:
                self._keep(*item)
                event = progress(len(wanted & self.embedded))
                if event is not None:
                    yield event
                if checkpoint is not None:
                    checkpoint()
        except BaseException:
            self.stop.set()
            self.thread.join()
            raise
        self.thread.join()
        return self.vectors

    def abandon(self) -> None:
        """Stop after the batch in hand and wait for the thread (harmless once finished)."""
        self.stop.set()
        if not self.closed:
            self.closed = True
            self.batches.put(None)
        self.thread.join()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


Checkpoint = Callable[[], None]
"""Called at every page and embedding-batch boundary; raises (CancelledError, ...) to stop the
ingestion there. Nothing is written before the final transaction, so stopping is always clean."""


def _embed_with_progress(
    embedder: Embedder, texts: list[str], slice_size: int,
    keep: Callable[[int, np.ndarray], None], checkpoint: Checkpoint | None = None,
) -> Iterator[int]:
    """Run the embedder in a worker thread over ``texts`` in slices of ``slice_size``, yielding
    the number of texts embedded so far after each batch; ``keep(start, vectors)`` is called
    on this thread for each finished slice (the caller caches it), also for slices finished
    when the run is stopped, so no vector computed is lost.

    If the consumer stops early (a closed generator: the user left the page, the CLI was
    interrupted), the worker is told to stop at its next progress report instead of spending
    CPU or API quota on vectors nobody will store. A ``checkpoint`` that raises after a batch
    stops the worker the same way, waits for it, and passes the exception on.
    """

    def work(relay: Relay[None]) -> None:
        for start in range(0, len(texts), slice_size):
            relay.check()  # stopped: no new slice is started

            def progress(done: int, _total: int, start: int = start) -> None:
                relay.report(start + done)

            relay.deliver((start, embedder.embed_documents(texts[start : start + slice_size],
                                                           progress=progress)))

    def keep_slices(items: Iterable[Any]) -> None:
        for item in items:
            if not isinstance(item, int):
                keep(*item)

    worker: Relay[None] = Relay(work, "marginalia-embed")
    try:
        for item in worker:
            if not isinstance(item, int):
                keep(*item)
                continue
            yield item
            if checkpoint is not None:
                checkpoint()
    except GeneratorExit:  # nobody waits: the worker stops at its next batch, unwaited
        worker.stop(wait=False)
        raise
    except BaseException:
        keep_slices(worker.stop(wait=True))  # slices finished meanwhile are kept all the same
        raise
    worker.result()


class _EmbeddingProgress:
    """``embedding`` events that count only the passages this ingestion really embeds (those
    not already in the cache) and never go backwards."""

    def __init__(self, file: str, total: int, cached: int):
        self.file = file
        self.total = total
        self.cached = cached
        self.done = -1

    def __call__(self, done: int) -> events.IngestEvent | None:
        if done == self.done:
            return None
        self.done = done
        return events.stage("embedding", self.file, done=done, total=self.total,
                            cached=self.cached)


def _index_text(
    store: LibraryStore,
    embedder: Embedder,
    *,
    name: str,
    text: str,
    page_starts: list[int],
    target: int,
    overlap: int,
    checkpoint: Checkpoint | None = None,
    early: _EarlyEmbeddings | None = None,
    units: Sequence[Unit] = (),
    **document: Any,
) -> Generator[events.IngestEvent, None, Document]:
    """chunk -> embed -> store, yielding stage events; returns the stored document.

    Only texts the embedding cache lacks are embedded. ``early`` is embedding chunks of the
    text while it was read: it is waited for, and only the chunks it did not embed are embedded
    here. ``embedding`` events count the passages to embed (``cached`` says how many were
    reused). ``document`` carries the remaining
    ``Store.add_document`` fields (mime, size, hash, ...).
    """
    yield events.stage("chunking", name, characters=len(text))
    kind = formats.by_mime(document.get("mime")).location
    chunks = [replace(c, location=formats.location_label(kind, units, c.page_start, c.page_end))
              for c in chunk_text(text, target=target, overlap=overlap, page_starts=page_starts)]
    yield events.stage("chunking", name, chunks=len(chunks))
    if checkpoint is not None:
        checkpoint()
    cache = EmbeddingCache(store, embedder.key)
    if early is not None:
        early.pump()
    texts = list(dict.fromkeys(c.text for c in chunks))  # each distinct text embedded once
    known = cache.lookup(texts)
    embedded_here = early.embedded if early is not None else set()
    # to embed: what no earlier ingestion embedded (this one's early vectors count as work)
    wanted = [t for t in texts if t not in known or t in embedded_here]
    progress = _EmbeddingProgress(name, len(wanted), len(texts) - len(wanted))
    first = progress(len(embedded_here & set(wanted)))
    if first is not None:
        yield first
    vectors_by_text = dict(known)
    if early is not None:
        vectors_by_text.update((yield from early.finish(name, set(wanted), progress, checkpoint)))
    missing = [t for t in wanted if t not in vectors_by_text]
    if missing:
        ready = len(wanted) - len(missing)
        slice_size = max(CACHE_SLICE,
                         embedder.batch_size * int(getattr(embedder, "concurrency", 1)))

        def keep(start: int, fresh: np.ndarray) -> None:
            new = dict(zip(missing[start : start + len(fresh)], fresh, strict=True))
            cache.add(new)
            vectors_by_text.update(new)

        for done in _embed_with_progress(embedder, missing, slice_size, keep, checkpoint):
            event = progress(ready + done)
            if event is not None:
                yield event
    vectors = np.zeros((len(chunks), embedder.dimension), dtype=np.float32)
    for i, c in enumerate(chunks):
        vectors[i] = vectors_by_text[c.text]
    if checkpoint is not None:
        checkpoint()  # the last chance to stop: the transaction below is all or nothing
    yield events.stage("storing", name, chunks=len(chunks))
    return store.add_document(
        name=name,
        embed_model=embedder.model,
        embed_dim=embedder.dimension,
        chunks=chunks,
        embeddings=vectors,
        chunk_target=target,
        chunk_overlap=overlap,
        text=text,
        page_starts=page_starts,
        locations=formats.encode_units(units),
        **document,
    )


def ingest_bytes(
    store: LibraryStore,
    embedder: Embedder,
    settings: Settings,
    name: str,
    data: bytes,
    *,
    mime: str | None = None,
    password: str | None = None,
    checkpoint: Checkpoint | None = None,
    source_url: str | None = None,
    fetched_at: str | None = None,
    replace_id: str | None = None,
) -> Iterator[events.IngestEvent]:
    """Index one file's bytes; yields ``stage`` events then ``done`` or ``error``.

    A PDF reports ``extracting`` with ``done``/``total`` pages as it is read. ``checkpoint`` (see
    :data:`Checkpoint`) lets a job be cancelled between pages and between embedding batches.
    A fetched web page gives its ``source_url`` (its name, and kept with it), ``fetched_at``
    and its ``mime`` (authoritative); ``replace_id`` replaces that document (a refresh).
    """
    name = safe_name(name) if source_url is None else safe_url_name(source_url)
    replacing = replace_id
    try:
        yield events.stage("extracting", name)
        if checkpoint is not None:
            checkpoint()
        if len(data) > settings.max_upload_bytes:
            raise TooLargeError(too_large_message(name, settings))
        digest = content_hash(data)
        existing = store.find_by_hash(digest)
        replace_id = replacing
        if existing and replacing and existing.id == replacing and source_url:
            yield events.done(document=existing.to_dict(), duplicate=True, file=name,
                              message=f"{name} has not changed since it was added.")
            return
        if existing:
            if (existing.embed_model, existing.embed_dim) == (
                embedder.model,
                embedder.dimension,
            ):
                yield events.done(document=existing.to_dict(), duplicate=True, file=name,
                                  message=f"{name} is already indexed as {existing.name}.")
                return
            replace_id = existing.id  # indexed by another embedder: re-index in place
        early = (_EarlyEmbeddings(embedder, EmbeddingCache(store, embedder.key),
                                  settings.retrieval.chunk_target,
                                  settings.retrieval.chunk_overlap)
                 if settings.embed_while_reading else None)
        try:
            extracted = yield from _extract_with_progress(
                name, data, mime=mime, password=password, max_bytes=settings.max_upload_bytes,
                checkpoint=checkpoint, on_text=early.add_page if early else None,
                between_pages=early.pump if early else None, ocr=settings.ocr,
                declared_mime=mime if source_url else None,
            )
            same = _near_duplicate(store, name, extracted.text, replace_id, settings)
            if same is not None:
                replace_id = same
            doc = yield from _index_text(
                store,
                embedder,
                name=name,
                text=extracted.text,
                page_starts=extracted.page_starts,
                target=settings.retrieval.chunk_target,
                overlap=settings.retrieval.chunk_overlap,
                mime=extracted.mime,
                size=len(data),
                content_hash=digest,
                page_count=extracted.page_count,
                replace_id=replace_id,
                document_id=same if same is not None else replacing,  # scopes, links kept
                original=data if formats.by_mime(extracted.mime).keep_original else None,
                ocr_pages=extracted.ocr_pages,
                parse_health=parse_health(extracted),
                units=extracted.units,
                source_url=source_url,
                fetched_at=fetched_at,
                checkpoint=checkpoint,
                early=early,
            )
        finally:
            if early is not None:  # a refusal, a cancel or a closed stream: stop its thread
                early.abandon()
        yield events.done(document=doc.to_dict(), duplicate=False, file=name)
    except NearDuplicateError as exc:
        yield events.error(exc.message, exc.reason, file=name, existing_id=exc.existing_id,
                           existing_name=exc.existing_name)
    except MarginaliaError as exc:
        yield events.error(exc.message, exc.reason, file=name)
    except Exception as exc:  # never a traceback for the user; the log keeps it
        log.exception("unexpected failure indexing %s", name)
        yield events.error(
            f"Could not index {name}: unexpected {type(exc).__name__}. Nothing was saved.",
            "internal",
            file=name,
        )


def _near_duplicate(
    store: LibraryStore, name: str, text: str, replace_id: str | None, settings: Settings
) -> str | None:
    """The id of the document this text nearly duplicates, when the settings say to replace
    it; raises ``NearDuplicateError`` (naming it) when they say to refuse; None when the text
    is new."""
    found = store.near_duplicates(fingerprint(text), exclude=replace_id)
    if not found:
        return None
    existing, share = found[0]
    if settings.on_duplicate == "replace":
        return existing.id
    what = ("has the same text as" if share >= 1.0
            else f"shares {share:.0%} of its passages with")
    raise NearDuplicateError(
        f"{name} {what} {existing.name}, which is already indexed. Replace "
        f"{existing.name} with it, or keep the one you have (nothing was saved).",
        existing_id=existing.id, existing_name=existing.name,
    )


def _extract_with_progress(
    name: str,
    data: bytes,
    *,
    checkpoint: Checkpoint | None = None,
    on_text: Callable[[str], None] | None = None,
    between_pages: Callable[[], None] | None = None,
    **options: Any,
) -> Generator[events.IngestEvent, None, Extracted]:
    """``extract`` in a worker thread, yielding an ``extracting`` event per PDF page read and an
    ``ocr`` event per page recognised by OCR; the checkpoint runs on the reading thread after
    each page, so a cancel stops it there. ``between_pages`` runs on this (the consuming)
    thread after each page."""

    def work(relay: Relay[Extracted]) -> Extracted:
        def on_page(done: int, total: int, text: str) -> None:
            relay.check()  # nobody is reading the events any more: stop here
            if checkpoint is not None:
                checkpoint()
            if on_text is not None:
                on_text(text)
            relay.report(("extracting", done, total))

        def on_ocr_page(done: int, total: int) -> None:
            relay.check()
            if checkpoint is not None:
                checkpoint()
            relay.report(("ocr", done, total))

        return extract(name, data, on_page=on_page, ocr_progress=on_ocr_page, **options)

    worker: Relay[Extracted] = Relay(work, "marginalia-extract")
    try:
        for stage, done, total in worker:
            yield events.stage(stage, name, done=done, total=total)
            if between_pages is not None:
                between_pages()
    except BaseException:  # also a closed generator: the reader stops at its next page and
        worker.stop(wait=True)  # is waited for, so nothing outlives us
        raise
    return worker.result()


def read_path(
    path: str | Path, settings: Settings
) -> tuple[str, bytes | None, events.ErrorEvent | None]:
    """(display name, bytes, None), or (name, None, error event) for a file that cannot be read
    or is over the limit (refused before it is read)."""
    path = Path(path)
    name = safe_name(path.name)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise MarginaliaError(f"{name} is not a regular file.")
    except OSError as exc:
        return name, None, events.error(f"Cannot read {name}: {exc.strerror or exc}.",
                                        "unreadable", file=name)
    except MarginaliaError as exc:
        return name, None, events.error(exc.message, "unreadable", file=name)
    if size > settings.max_upload_bytes:
        return name, None, events.error(too_large_message(name, settings), TooLargeError.reason,
                                        file=name)
    try:
        return name, path.read_bytes(), None
    except OSError as exc:
        return name, None, events.error(f"Cannot read {name}: {exc.strerror or exc}.",
                                        "unreadable", file=name)


def ingest_path(
    store: LibraryStore,
    embedder: Embedder,
    settings: Settings,
    path: str | Path,
    *,
    password: str | None = None,
) -> Iterator[events.IngestEvent]:
    """Index a file on disk, refusing an oversize one before reading it."""
    name, data, refused = read_path(path, settings)
    if refused is not None or data is None:
        yield refused or events.error(f"Cannot read {name}.", "unreadable", file=name)
        return
    yield from ingest_bytes(store, embedder, settings, name, data, password=password)


def reindex_document(
    store: LibraryStore,
    embedder: Embedder,
    settings: Settings,
    document_id: str,
    *,
    target: int | None = None,
    overlap: int | None = None,
) -> Iterator[events.IngestEvent]:
    """Re-chunk and re-embed a stored document (new chunk sizes or a new embedder), replacing it
    in one transaction. Without ``target``/``overlap`` it keeps its own chunking."""
    try:
        doc = store.get_document(document_id)
        name = doc.name
        text, page_starts = store.document_source(document_id)
        original = store.document_file(document_id)  # replaced with the document: carry it over
        # unless told otherwise, a document keeps the chunking it was indexed with
        target = target or doc.chunk_target or settings.retrieval.chunk_target
        if overlap is None:
            overlap = doc.chunk_overlap
        new = yield from _index_text(
            store,
            embedder,
            name=name,
            text=text,
            page_starts=page_starts,
            target=target,
            overlap=overlap,
            mime=doc.mime,
            size=doc.size,
            content_hash=doc.content_hash,
            page_count=doc.page_count,
            replace_id=document_id,
            document_id=document_id,
            original=original,
            ocr_pages=doc.ocr_pages,
            parse_health=doc.parse_health,
            units=formats.decode_units(doc.locations, doc.page_count),
            source_url=doc.source_url,
            fetched_at=doc.fetched_at,
        )
        yield events.done(document=new.to_dict(), duplicate=False, file=name, reindexed=True)
    except MarginaliaError as exc:
        yield events.error(exc.message, exc.reason, document_id=document_id)
    except Exception as exc:
        log.exception("unexpected failure re-indexing %s", document_id)
        yield events.error(
            f"Re-indexing failed: unexpected {type(exc).__name__}. The document is unchanged.",
            "internal",
            document_id=document_id,
        )


def too_large_message(name: str, settings: Settings) -> str:
    return (
        f"{name} is larger than the {settings.max_upload_mb:g} MB limit "
        "(MARGINALIA_MAX_UPLOAD_MB)."
    )


MAX_NAME_CHARS = 200


def ingest_url(
    store: LibraryStore,
    embedder: Embedder,
    settings: Settings,
    url: str,
    *,
    replace_id: str | None = None,
) -> Iterator[events.IngestEvent]:
    """Fetch a web page (only on this explicit request) and index it under its final URL:
    ``stage`` ``fetching``, then as :func:`ingest_bytes`. ``replace_id``: a refresh of that
    document (an unchanged page is reported as such and left alone)."""
    shown = safe_url_name(web.display_url(url.strip()))
    try:
        yield events.stage("fetching", shown)
        page = web.fetch(url, max_bytes=min(settings.max_upload_bytes, web.MAX_PAGE_BYTES))
    except MarginaliaError as exc:
        yield events.error(exc.message, exc.reason, file=shown)
        return
    yield from ingest_bytes(store, embedder, settings, page.url, page.data, mime=page.mime,
                            source_url=page.url, fetched_at=page.fetched_at,
                            replace_id=replace_id)


def refresh_document(
    store: LibraryStore, embedder: Embedder, settings: Settings, document_id: str
) -> Iterator[events.IngestEvent]:
    """Fetch a web page document's address again and replace it if its content changed."""
    try:
        doc = store.get_document(document_id)
    except MarginaliaError as exc:
        yield events.error(exc.message, exc.reason, document_id=document_id)
        return
    if not doc.source_url:
        yield events.error(f"{doc.name} was not added from a web address; there is nothing "
                           "to refresh.", "invalid_input", document_id=document_id)
        return
    yield from ingest_url(store, embedder, settings, doc.source_url, replace_id=document_id)


def safe_url_name(url: str) -> str:
    """A web page's display name: its address, printable and bounded."""
    cleaned = "".join(ch if ch.isprintable() else "_" for ch in url).strip() or "web page"
    return cleaned if len(cleaned) <= MAX_NAME_CHARS else cleaned[: MAX_NAME_CHARS - 1] + "…"


def safe_name(name: str) -> str:
    """A display name: no directories, no control characters, bounded length; a shortened name
    keeps its extension, which decides how the file is read."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(ch if ch.isprintable() else "_" for ch in base).strip() or "unnamed"
    if len(cleaned) <= MAX_NAME_CHARS:
        return cleaned
    stem, dot, ext = cleaned.rpartition(".")
    if dot and stem and len(ext) <= 10:
        return stem[: MAX_NAME_CHARS - len(ext) - 2] + "…." + ext
    return cleaned[: MAX_NAME_CHARS - 1] + "…"


@dataclass(frozen=True)
class IngestOutcome:
    """How one file's ingestion ended, for a person: ``indexed``, ``duplicate`` or ``refused``
    (with the refusal's ``reason`` code and plain ``message``)."""

    name: str
    state: str
    reason: str | None = None
    message: str = ""
    chunks: int = 0
    pages: int = 1
    document_id: str | None = None  # a near-duplicate refusal: the document it matches
    existing: str | None = None  # the name a (near-)duplicate is already indexed under
    mime: str = ""  # of an indexed document: only PDFs have pages worth naming

    @classmethod
    def from_event(cls, end: events.IngestEvent | None, name: str) -> IngestOutcome:
        if end is None or end["type"] == "stage":  # cannot happen: a stream always ends
            return cls(name, "refused", "internal", "No result.")
        if end["type"] == "error":
            return cls(end.get("file", name), "refused", end.get("reason"), end.get("message", ""),
                       document_id=end.get("existing_id"), existing=end.get("existing_name"))
        doc: dict[str, Any] = end.get("document") or {}
        if end.get("duplicate"):
            return cls(
                end.get("file", name), "duplicate", message=end.get("message", ""),
                document_id=doc.get("id"), existing=doc.get("name") or None,
            )
        return cls(
            doc.get("name", name), "indexed", chunks=doc.get("chunk_count", 0),
            pages=doc.get("page_count", 1), document_id=doc.get("id"),
            mime=doc.get("mime", ""),
        )


def follow(
    stream: Iterable[events.IngestEvent],
    on_stage: Callable[[events.StageEvent], None] | None = None,
) -> events.IngestEvent | None:
    """Drain an ingestion stream, passing each ``stage`` event to ``on_stage``; the final
    ``done``/``error`` event."""
    end: events.IngestEvent | None = None
    for event in stream:
        if event["type"] == "stage":
            if on_stage is not None:
                on_stage(event)
        else:
            end = event
    return end
