"""Background ingestion jobs: an upload becomes a row in ``ingest_jobs`` (with its bytes) and a
worker thread in the app's process runs it, so leaving the page, closing the tab or opening a
second one never stops or hides it.

Statuses: ``queued`` -> ``running`` -> ``done`` | ``refused`` | ``cancelled`` | ``failed``; a
job whose process died (or shut down) mid-way is ``interrupted`` and keeps its bytes until a
person resumes or discards it. Several processes may share one database (SQLite or PostgreSQL;
the rows are the store's ``ingest_jobs`` methods): a claim is exclusive, so only one of them
runs a job.
The document itself is still written in one transaction at the very end of the pipeline, so a
cancel, a crash or a kill never leaves half a document. Passwords live in this process's memory
only, never in the database.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from marginalia_core import events
from marginalia_core.config import Settings
from marginalia_core.errors import CancelledError, JobInterruptedError, NotFoundError
from marginalia_core.ingest.formats import mime_for_name
from marginalia_core.ingest.pipeline import (
    IngestOutcome,
    ingest_bytes,
    safe_name,
    too_large_message,
)
from marginalia_core.providers.embeddings.base import Embedder
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.rows import new_id, now_iso

log = logging.getLogger(__name__)

ACTIVE = ("queued", "running")
ENDED = ("done", "refused", "cancelled", "failed")
# refusals that are not the file's fault: the job "failed" and may simply be tried again
FAILURE_REASONS = frozenset({"internal", "embedding", "auth"})
# refusals a person can fix by giving a password; the upload is kept for that retry
PASSWORD_REASONS = frozenset({"encrypted", "wrong_password"})
# a near-duplicate of an indexed document: kept so a person can choose to replace that one
CHOICE_REASONS = frozenset({"near_duplicate"})
# the idle worker looks for jobs queued by other processes (and dead peers) this often
POLL_SECONDS = 1.0
# progress is written at most this often (and on every stage change): cheap, and fresh enough
PROGRESS_EVERY_S = 0.5
# a running job whose owner cannot be checked (another host) and whose heartbeat is older
# than this is taken to be orphaned
STALE_AFTER_S = 300.0
# queued jobs a claim tries, oldest first, when a peer takes the first one at the same moment
CLAIM_CANDIDATES = 8
# share of a PDF job's time spent reading pages (the rest embeds passages), for the estimate;
# measured on the 352-page book (benchmarks/bench_ingest.py)
EXTRACT_SHARE = 0.25
# an estimate needs this much of the work done to be worth showing
MIN_FRACTION_FOR_ETA = 0.03
RECENT_JOBS = 20
CANCELLED_MESSAGE = "Cancelled before it started; nothing was saved."
INTERRUPTED_MESSAGE = ("Interrupted: Marginalia stopped while indexing it. Nothing was saved; "
                       "resume to index it again.")

HOST = socket.gethostname()
# one token per process: every queue in this process shares it, so "same pid, other token"
# means a previous process that had this pid
PROCESS_TOKEN = uuid.uuid4().hex[:12]


def process_owner() -> str:
    return f"{HOST}:{os.getpid()}:{PROCESS_TOKEN}"


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


# Job id -> password of an encrypted PDF, in this process's memory only (never the database):
# the page that takes the password and the worker that opens the PDF hold different queues.
_PASSWORDS: dict[str, str] = {}
# Jobs a person told to replace the document their text nearly duplicates (this process).
_REPLACING: set[str] = set()


@dataclass(frozen=True)
class Job:
    """One ingestion job as stored (never its bytes): progress, outcome and timing."""

    id: str
    batch_id: str
    position: int
    batch_size: int
    name: str
    mime: str | None
    size: int
    status: str
    stage: str
    pages_done: int
    pages_total: int
    chunks_done: int
    chunks_total: int
    reason: str | None
    message: str
    document_id: str | None
    duplicate: bool
    cancel_requested: bool
    owner: str | None
    heartbeat: str | None
    created: str
    started: str | None
    finished: str | None
    has_data: bool = False

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def resumable(self) -> bool:
        """Interrupted with its upload kept: a person can run it again."""
        return self.status == "interrupted" and self.has_data

    @property
    def needs_password(self) -> bool:
        return self.status == "refused" and self.reason in PASSWORD_REASONS and self.has_data

    @property
    def offers_replace(self) -> bool:
        """Refused as a near-duplicate of ``document_id``, upload kept: it may replace it."""
        return self.status == "refused" and self.reason in CHOICE_REASONS and self.has_data

    @property
    def fraction(self) -> float:
        """How much of the work is done, 0..1 (pages read, then passages embedded)."""
        if self.status in ENDED:
            return 1.0
        if self.status != "running":
            return 0.0
        read = self.pages_done / self.pages_total if self.pages_total else 0.0
        if self.stage in ("extracting", ""):
            return EXTRACT_SHARE * read
        embedded = self.chunks_done / self.chunks_total if self.chunks_total else 0.0
        if self.stage == "storing":
            embedded = 1.0
        return EXTRACT_SHARE + (1 - EXTRACT_SHARE) * embedded

    def elapsed(self, now: datetime | None = None) -> float | None:
        """Seconds since it started (to its end, once ended); None before it starts."""
        start = _parse(self.started)
        if start is None:
            return None
        end = _parse(self.finished) or now or datetime.now(UTC)
        return max(0.0, (end - start).total_seconds())

    def eta(self, now: datetime | None = None) -> float | None:
        """Estimated seconds left for a running job, from its pace so far; None when too early
        to tell."""
        if self.status != "running":
            return None
        spent = self.elapsed(now)
        share = self.fraction
        if spent is None or share < MIN_FRACTION_FOR_ETA:
            return None
        return spent * (1 - share) / share

    def outcome(self) -> IngestOutcome:
        """How an ended job turned out, in the terms the upload results use."""
        if self.status == "done":
            state = "duplicate" if self.duplicate else "indexed"
            mime = self.mime or mime_for_name(self.name)
            return IngestOutcome(self.name, state, message=self.message,
                                 chunks=self.chunks_total, pages=self.pages_total or 1,
                                 document_id=self.document_id, mime=mime)
        return IngestOutcome(self.name, "refused", self.reason or self.status, self.message,
                             document_id=self.document_id)

    @classmethod
    def from_row(cls, row: Any) -> Job:
        data = dict(row)
        data["duplicate"] = bool(data.get("duplicate"))
        data["cancel_requested"] = bool(data.get("cancel_requested"))
        data["has_data"] = bool(data.get("has_data"))
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


def owner_is_dead(owner: str | None, heartbeat: str | None, now: datetime | None = None) -> bool:
    """Whether the process that claimed a job can no longer be running it."""
    if owner == process_owner():
        return False
    host, _, rest = (owner or "").partition(":")
    pid_text, _, token = rest.partition(":")
    beat = _parse(heartbeat)
    stale = beat is None or ((now or datetime.now(UTC)) - beat).total_seconds() > STALE_AFTER_S
    if host != HOST or not pid_text.isdigit():
        return stale
    pid = int(pid_text)
    if pid == os.getpid():
        return token != PROCESS_TOKEN  # an earlier process that had our pid
    # same host: the process table decides (a long quiet stretch is not death). A restarted
    # app that got its old pid back recognises the job as its predecessor's by the token.
    return not _pid_alive(pid)


@dataclass(frozen=True)
class Upload:
    """One file handed to :meth:`JobQueue.submit`."""

    name: str
    data: bytes
    mime: str | None = None


class JobQueue:
    """The jobs of one database, and running them. Safe to share between threads."""

    def __init__(self, store: LibraryStore, settings: Settings, embedder: Callable[[], Embedder]):
        self.store = store
        self.settings = settings
        self._embedder = embedder
        self._passwords = _PASSWORDS  # shared by every queue of this process, memory only
        self._changed = threading.Condition()
        self.recover()

    # ------------------------------------------------------------------ reading

    def jobs(self, *, limit: int = RECENT_JOBS) -> list[Job]:
        """Active and interrupted jobs (oldest first, the order they run), then the most recent
        ended ones (newest first)."""
        return [Job.from_row(r) for r in self.store.list_jobs(ended_limit=limit)]

    def active(self) -> list[Job]:
        return [j for j in self.jobs(limit=0) if j.active]

    def job(self, job_id: str) -> Job:
        row = self.store.get_job(job_id)
        if row is None:
            raise NotFoundError("That ingestion job no longer exists.")
        return Job.from_row(row)

    # ------------------------------------------------------------------ changing

    def submit(
        self, uploads: Sequence[Upload], *, password: str | None = None, running: bool = False
    ) -> list[Job]:
        """Queue ``uploads`` as one batch (file i of n), in one transaction. An oversize file
        is recorded as refused at once, without keeping its bytes. ``running`` claims the jobs
        for this process straight away (the CLI runs them inline)."""
        batch = new_id()
        created = now_iso()
        rows: list[dict[str, Any]] = []
        for position, upload in enumerate(uploads, start=1):
            name = safe_name(upload.name)
            data = bytes(upload.data)
            status, message, reason, finished = "queued", "", None, None
            if len(data) > self.settings.max_upload_bytes:
                status, reason = "refused", "too_large"
                message, finished = too_large_message(name, self.settings), created
            elif running:
                status = "running"
            rows.append({
                "id": new_id(), "batch_id": batch, "position": position,
                "batch_size": len(uploads), "name": name, "mime": upload.mime,
                "size": len(data), "data": None if status == "refused" else data,
                "status": status, "reason": reason, "message": message,
                "owner": process_owner() if running else None,
                "heartbeat": created if running else None, "created": created,
                "started": created if running else None, "finished": finished,
            })
        if password:  # before the commit: a worker may claim a job the moment it lands
            self._passwords.update((r["id"], password) for r in rows)
        try:
            jobs = [Job.from_row(r) for r in self.store.insert_jobs(rows)]
        except BaseException:
            for r in rows:
                self._passwords.pop(r["id"], None)
            raise
        self._notify()
        return jobs

    def cancel(self, job_id: str) -> bool:
        """Cancel a job: a queued or interrupted one at once (its bytes dropped), a running one
        at its next page or batch boundary. False if it had already ended."""
        dropped = self.store.cancel_job(job_id, CANCELLED_MESSAGE)
        self._passwords.pop(job_id, None)
        self._notify()
        return dropped

    def resume(
        self, job_id: str | None = None, *, password: str | None = None, replace: bool = False
    ) -> list[Job]:
        """Queue again an interrupted job (or, without ``job_id``, every interrupted job), a
        refused encrypted PDF with a ``password``, or with ``replace`` a near-duplicate that
        is to replace the document it matches. Returns the jobs queued."""
        def remember(jid: str) -> None:  # before the commit: a worker may claim it at once
            if password:
                self._passwords[jid] = password
            if replace:
                _REPLACING.add(jid)

        reasons = PASSWORD_REASONS | (CHOICE_REASONS if replace else frozenset())
        queued = self.store.requeue_jobs(job_id, sorted(reasons), remember)
        self._notify()
        return [self.job(j) for j in queued]

    def clear_finished(self, batch_id: str | None = None) -> int:
        """Forget ended jobs (the list of recent outcomes), or one batch's; returns how many.
        A batch's refusals that still hold their upload (a password, a near-duplicate's
        choice) are kept."""
        return self.store.clear_finished_jobs(ENDED, batch_id)

    def recover(self) -> list[str]:
        """Mark ``interrupted`` the running jobs whose process is gone; their bytes stay so a
        person can resume them. Returns their ids."""
        dead = [r["id"] for r in self.store.running_jobs()
                if owner_is_dead(r["owner"], r["heartbeat"])]
        marked = [job_id for job_id in dead
                  if self.store.interrupt_job(job_id, INTERRUPTED_MESSAGE, owner_is_dead)]
        if marked:
            log.warning("marked %d ingestion job(s) interrupted", len(marked))
        return marked

    # ------------------------------------------------------------------ running

    def claim(self) -> Job | None:
        """Take the oldest queued job for this process, or None; exclusive across processes
        (``store.claim_job``)."""
        job_id = self.store.claim_job(process_owner(), candidates=CLAIM_CANDIDATES)
        return None if job_id is None else self.job(job_id)

    def run(
        self, job_id: str, *, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[events.IngestEvent]:
        """Run a job this process has claimed: the pipeline's events, with progress recorded
        as they pass. ``should_stop`` (the process is shutting down) interrupts it at the next
        boundary, keeping its bytes for a resume."""
        payload = self.store.job_payload(job_id, process_owner())
        if payload is None:
            return
        name, mime, data = payload
        password = self._passwords.pop(job_id, None)
        settings = self.settings
        if job_id in _REPLACING:
            _REPLACING.discard(job_id)
            settings = settings.with_overrides(on_duplicate="replace")
        progress = _Progress(self.store, job_id)

        def checkpoint() -> None:
            if should_stop is not None and should_stop():
                raise JobInterruptedError("Interrupted: Marginalia is shutting down.")
            if progress.cancel_requested():  # on any thread: the page reader has its own
                raise CancelledError(f"Cancelled: {name} was not indexed; nothing was saved.")

        end: events.IngestEvent | None = None
        try:
            stream = ingest_bytes(
                self.store, self._embedder(), settings, name, data, mime=mime,
                password=password, checkpoint=checkpoint,
            )
            for event in stream:
                if event["type"] == "stage":
                    progress.record(event)
                else:
                    end = event
                yield event
        finally:
            progress.finish(end)
            self._notify()

    def run_inline(
        self, uploads: Sequence[Upload], *, password: str | None = None
    ) -> Iterator[events.IngestEvent]:
        """Record ``uploads`` as jobs this process runs now, one after the other (the CLI): the
        same events and the same job rows as the app's worker."""
        for job in self.submit(uploads, password=password, running=True):
            if job.status == "refused":
                yield events.error(job.message, job.reason or "refused", file=job.name)
                continue
            yield from self.run(job.id)

    # ------------------------------------------------------------------ waiting

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_changed(self, timeout: float) -> None:
        """Block until a job of this queue changes state here, or ``timeout`` seconds."""
        with self._changed:
            self._changed.wait(timeout)

    def wait(self, job_ids: Sequence[str], *, timeout: float) -> list[Job]:
        """Wait until the given jobs are no longer queued or running (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = [self.job(j) for j in job_ids]
            left = deadline - time.monotonic()
            if not any(j.active for j in jobs) or left <= 0:
                return jobs
            self.wait_changed(min(left, POLL_SECONDS))


class _Progress:
    """A running job's progress, written to its row at most every PROGRESS_EVERY_S (and on each
    new stage); each write is also the owner's heartbeat."""

    def __init__(self, store: LibraryStore, job_id: str):
        self.store = store
        self.job_id = job_id
        self.values = {"stage": "", "pages_done": 0, "pages_total": 0, "chunks_done": 0,
                       "chunks_total": 0}
        self._written = 0.0
        self._owner_thread = threading.get_ident()
        self._cancelled = threading.Event()

    def record(self, event: events.StageEvent) -> None:
        stage = event.get("stage", "")
        changed = stage != self.values["stage"]
        self.values["stage"] = stage
        if stage == "extracting" and "total" in event:
            self.values["pages_done"] = int(event.get("done") or 0)
            self.values["pages_total"] = int(event.get("total") or 0)
        elif stage == "chunking" and "chunks" in event:
            # chunks_* count the passages to embed (the embedding cache may hold the rest),
            # so they are first set by the embedding stage
            if not self.values["pages_total"]:  # text files: one page, read
                self.values["pages_done"] = self.values["pages_total"] = 1
        elif stage == "embedding":
            self.values["chunks_done"] = int(event.get("done") or 0)
            self.values["chunks_total"] = int(event.get("total") or 0)
        if changed or time.monotonic() - self._written >= PROGRESS_EVERY_S:
            self._write()
        self._poll_cancel()

    def _write(self) -> None:
        self.store.record_job_progress(self.job_id, self.values)
        self._written = time.monotonic()

    def _poll_cancel(self) -> None:
        if self.store.job_cancel_requested(self.job_id):
            self._cancelled.set()

    def cancel_requested(self) -> bool:
        """Whether a person asked to cancel. The database is read only on the thread running
        the job (each thread would open its own connection); helper threads (the page reader)
        see what that thread last read, at most one page late."""
        if threading.get_ident() == self._owner_thread:
            self._poll_cancel()
        return self._cancelled.is_set()

    def finish(self, end: events.IngestEvent | None) -> None:
        """Record the outcome; the bytes go, except where a person can still act on them (an
        interruption to resume, a refusal that wants a password)."""
        keep = False
        values: dict[str, Any] = {"reason": None, "document_id": None, "duplicate": 0,
                                  "message": ""}
        if end is None:  # the consumer stopped reading (process exit, closed stream)
            status, keep = "interrupted", True
            values["message"] = "Interrupted before it finished; nothing was saved."
        elif end["type"] == "done":
            status = "done"
            doc = end.get("document") or {}
            values.update(document_id=doc.get("id"), duplicate=int(bool(end.get("duplicate"))),
                          message=end.get("message", ""))
            if doc.get("chunk_count") is not None:  # an ended job: the document's passages
                values.update(chunks_done=doc["chunk_count"], chunks_total=doc["chunk_count"])
            if doc.get("page_count"):  # slides, rows, sections: the document's own count
                self.values["pages_done"] = self.values["pages_total"] = int(doc["page_count"])
        else:
            reason = end.get("reason")
            values.update(reason=reason, message=end.get("message", ""),
                          document_id=end.get("existing_id"))
            if reason == "cancelled":
                status = "cancelled"
            elif reason == "interrupted":
                status, keep = "interrupted", True
            elif reason in FAILURE_REASONS:
                status = "failed"
            else:
                status = "refused"
                keep = reason in PASSWORD_REASONS | CHOICE_REASONS
        self.store.finish_job(self.job_id, process_owner(), status,
                              {**self.values, **values}, keep_data=keep)


# How long the process's exit waits for a running job to reach its next page or batch
# boundary (where it stops, marked interrupted, its upload kept for a resume).
EXIT_WAIT_S = 60.0
_WORKERS: weakref.WeakSet[JobWorker] = weakref.WeakSet()


@atexit.register
def _stop_workers_at_exit() -> None:
    """Ctrl-C on ``make run`` / streamlit ends the main thread while the worker (a daemon) may
    be inside the embedding model: killed there at exit, onnxruntime's threads abort the
    process ("terminate called without an active exception") and the job stays "running"
    until recovered. Stopping each worker at its next boundary first makes the exit clean and
    the job ``interrupted``, ready to resume."""
    for worker in list(_WORKERS):
        worker.stop(timeout=EXIT_WAIT_S)


class JobWorker:
    """The one background thread of a process that runs queued jobs, oldest first."""

    def __init__(self, queue: JobQueue):
        self.queue = queue
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> JobWorker:
        with self._lock:
            if not self.running:
                self._stopping.clear()
                self._thread = threading.Thread(
                    target=self._loop, name="marginalia-jobs", daemon=True
                )
                self._thread.start()
                _WORKERS.add(self)
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current job's next boundary (it is marked interrupted, bytes kept)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                job = self.queue.claim()
                if job is None:
                    self.queue.recover()  # peers that died while running a job
                    self._wake.wait(POLL_SECONDS)
                    self._wake.clear()
                    continue
                for _ in self.queue.run(job.id, should_stop=self._stopping.is_set):
                    pass
            except Exception:  # the worker must outlive any one job; the job row says why
                log.exception("ingestion worker error")
                self._stopping.wait(POLL_SECONDS)
