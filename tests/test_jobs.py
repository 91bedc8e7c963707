"""Background ingestion jobs: queue, worker, progress, cancel at a boundary with nothing written,
exclusive claims across processes, and a job left running by a killed process marked
interrupted and resumed. On both backends (conftest's ``store_backend``): real SQLite files and
a real PostgreSQL, the real local embedder, real subprocesses."""

from __future__ import annotations

import io
import select
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from conftest import offline_cli_env
from pdf_maker import long_pdf, text_pdf

from marginalia_core.cli import main as cli_main
from marginalia_core.ingest.jobs import Job, JobQueue, Upload
from marginalia_core.store import open_store
from marginalia_core.store.base import LibraryStore
from marginalia_core.workspace import Workspace

pytestmark = pytest.mark.both_backends

WAIT_S = 300  # a bound on waiting, never an assertion about speed
TEXT = ("Marginalia are notes written in the margins of a book. " * 60).encode()


def _counts(store: LibraryStore) -> tuple[int, int]:
    conn = store.conn
    return (conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])


def _data_kept(store: LibraryStore, job_id: str) -> bool:
    row = store.conn.execute("SELECT data IS NOT NULL FROM ingest_jobs WHERE id = ?",
                             (job_id,)).fetchone()
    return bool(row[0])


@pytest.fixture
def slow_ws(settings, local_embedder):
    """A workspace whose embedder reports (and can be cancelled) after every passage: the real
    MARGINALIA_EMBED_BATCH code path, not a mock."""
    from marginalia_core.providers.embeddings.local import LocalEmbedder

    settings = replace(settings, embed_batch=1)
    ws = Workspace(settings)
    ws.__dict__["embedder"] = LocalEmbedder(settings)
    yield ws
    ws.close()


def test_worker_runs_a_batch_in_order_and_records_progress(workspace):
    workspace.start_worker()
    pdf = text_pdf(["The first page talks about vellum.", "The second page is on quires."])
    jobs = workspace.submit([("a.md", TEXT), ("b.pdf", pdf, "application/pdf"),
                             ("c.txt", b"short note about ink and scribes")])
    assert [(j.position, j.batch_size, j.status) for j in jobs] == [
        (1, 3, "queued"), (2, 3, "queued"), (3, 3, "queued")]
    assert len({j.batch_id for j in jobs}) == 1
    done = workspace.job_queue.wait([j.id for j in jobs], timeout=WAIT_S)
    assert [j.status for j in done] == ["done", "done", "done"]
    assert [j.started for j in done] == sorted(j.started for j in done)  # oldest first
    pdf_job = done[1]
    assert (pdf_job.pages_done, pdf_job.pages_total) == (2, 2)
    assert pdf_job.chunks_done == pdf_job.chunks_total > 0
    assert pdf_job.elapsed() is not None and pdf_job.fraction == 1.0
    docs = {d.id: d for d in workspace.documents()}
    assert {j.document_id for j in done} == set(docs)
    assert not any(_data_kept(workspace.store, j.id) for j in done)  # bytes dropped at the end


def test_refusals_and_duplicates_are_outcomes(workspace):
    workspace.start_worker()
    jobs = workspace.submit([("x.pdf", b"not a pdf at all"), ("a.md", TEXT),
                             ("copy.md", TEXT)])
    bad, first, copy = workspace.job_queue.wait([j.id for j in jobs], timeout=WAIT_S)
    assert (bad.status, bad.reason) == ("refused", "mislabelled")
    assert "pdf" in bad.message.lower()
    assert first.status == "done" and not first.duplicate
    assert copy.status == "done" and copy.duplicate and copy.document_id == first.document_id
    assert _counts(workspace.store)[0] == 1


def test_oversize_upload_refused_at_submit_without_keeping_bytes(settings, local_embedder):
    ws = Workspace(replace(settings, max_upload_mb=0.001))
    ws.__dict__["embedder"] = local_embedder
    try:
        [job] = ws.submit([("big.txt", b"a" * 4096)])
        assert (job.status, job.reason) == ("refused", "too_large")
        assert "MB limit" in job.message and not job.has_data
        assert ws.job_queue.claim() is None
    finally:
        ws.close()


def test_cancel_queued_job_never_runs(workspace):
    [job] = workspace.submit([("a.md", TEXT)])
    assert workspace.cancel(job.id)
    after = workspace.job(job.id)
    assert after.status == "cancelled" and not after.has_data
    assert workspace.job_queue.claim() is None
    assert not workspace.cancel(job.id)  # already ended


def test_cancel_running_job_stops_at_a_batch_with_nothing_written(slow_ws):
    q = slow_ws.job_queue
    [job] = slow_ws.submit([("book.pdf", long_pdf(12))])
    claimed = q.claim()
    assert claimed is not None and claimed.id == job.id
    seen = []
    asked_at = None
    for event in q.run(job.id):
        seen.append(event)
        if (event.get("stage") == "embedding" and asked_at is None
                and 0 < event["done"] < event["total"] - 2):
            asked_at = event["done"]
            assert slow_ws.cancel(job.id)
    end = seen[-1]
    assert end["type"] == "error" and end["reason"] == "cancelled"
    embedded = [e["done"] for e in seen if e.get("stage") == "embedding"]
    assert embedded[-1] == asked_at < seen[-2]["total"]  # stopped before the next batch
    after = q.job(job.id)
    assert after.status == "cancelled" and not after.has_data
    assert _counts(slow_ws.store) == (0, 0)


def test_cancel_during_extraction_stops_at_a_page(slow_ws):
    q = slow_ws.job_queue
    [job] = slow_ws.submit([("book.pdf", long_pdf(30))])
    q.claim()
    pages = []
    for event in q.run(job.id):
        if event.get("stage") == "extracting" and "done" in event:
            pages.append(event["done"])
            if event["done"] == 5:
                slow_ws.cancel(job.id)
    assert pages[-1] < 30  # never read the whole book
    assert q.job(job.id).status == "cancelled"
    assert _counts(slow_ws.store) == (0, 0)


def test_claim_is_exclusive_across_connections(settings, local_embedder):
    """Two stores on one database stand for two processes (and, on PostgreSQL, each thread
    has its own connection): every job is claimed exactly once."""
    stores = [open_store(settings), open_store(settings)]
    queues = [JobQueue(s, settings, lambda: local_embedder) for s in stores]
    try:
        ids = {j.id for j in queues[0].submit([Upload(f"{n}.txt", b"x" * n) for n in
                                                range(1, 13)])}
        claimed: list[list[str]] = [[], [], [], []]

        def grab(slot: int) -> None:
            q = queues[slot % 2]
            while (job := q.claim()) is not None:
                claimed[slot].append(job.id)

        threads = [threading.Thread(target=grab, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        every = [j for got in claimed for j in got]
        assert sorted(every) == sorted(ids)  # all claimed, none twice
    finally:
        for s in stores:
            s.close()


def test_password_is_passed_through_and_never_stored(workspace, tmp_path):
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(["Secret gloss page about vellum."])))
    writer.encrypt("hunter2-unique-pw")
    buffer = io.BytesIO()
    writer.write(buffer)
    data = buffer.getvalue()
    workspace.start_worker()
    [locked] = workspace.submit([("locked.pdf", data)])
    [locked] = workspace.job_queue.wait([locked.id], timeout=WAIT_S)
    assert (locked.status, locked.reason) == ("refused", "encrypted")
    assert locked.needs_password  # the upload is kept for a retry with the password
    [again] = workspace.resume(locked.id, password="wrong")
    [again] = workspace.job_queue.wait([again.id], timeout=WAIT_S)
    assert again.reason == "wrong_password" and again.needs_password
    workspace.resume(locked.id, password="hunter2-unique-pw")
    [done] = workspace.job_queue.wait([locked.id], timeout=WAIT_S)
    assert done.status == "done" and not done.has_data
    if workspace.store.backend == "sqlite":  # the file itself, with its write-ahead log
        workspace.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for path in tmp_path.glob("marginalia.db*"):
            assert b"hunter2-unique-pw" not in path.read_bytes()
    else:  # every column of every job row, as text
        [(hits,)] = workspace.store.conn.execute(
            "SELECT COUNT(*) FROM ingest_jobs j WHERE CAST(j AS TEXT) LIKE ?",
            ("%hunter2-unique-pw%",),
        ).fetchall()
        assert workspace.job_queue.jobs() and hits == 0


def test_stopping_the_worker_interrupts_and_resume_finishes(slow_ws):
    q = slow_ws.job_queue
    slow_ws.start_worker()
    [job] = slow_ws.submit([("book.pdf", long_pdf(12))])
    while (current := q.job(job.id)).chunks_done < 2 and current.active:
        q.wait_changed(0.2)
    slow_ws.stop_worker()
    stopped = q.job(job.id)
    assert stopped.status == "interrupted" and stopped.resumable
    assert _counts(slow_ws.store) == (0, 0)
    [queued] = slow_ws.resume()
    assert queued.status == "queued" and queued.chunks_done == 0
    slow_ws.start_worker()
    [done] = q.wait([job.id], timeout=WAIT_S)
    assert done.status == "done"
    assert _counts(slow_ws.store)[1] == done.chunks_total


CRASHING_WORKER = """
import sys
from marginalia_core.config import Settings
from marginalia_core.workspace import Workspace
db, pdf, url = sys.argv[1], sys.argv[2], sys.argv[3] or None
ws = Workspace(Settings(db_path=db, database_url=url, embedder="local", answerer="extractive",
                        embed_batch=1))
[job] = ws.submit([("book.pdf", open(pdf, "rb").read())])
ws.start_worker()
while ws.job(job.id).chunks_done < 2:
    ws.job_queue.wait_changed(0.2)
print(job.id, flush=True)
ws.job_queue.wait([job.id], timeout=600)
"""


@pytest.mark.slow
def test_job_left_running_by_a_killed_process_is_interrupted_and_resumes(tmp_path, workspace):
    pdf = tmp_path / "book.pdf"
    pdf.write_bytes(long_pdf(12))
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_WORKER, workspace.settings.db_path, str(pdf),
         workspace.settings.database_url or ""],
        stdout=subprocess.PIPE, env=offline_cli_env(), text=True,
    )
    try:
        job_id = proc.stdout.readline().strip()
        assert job_id, "the worker process did not start its job"
        row = workspace.store.conn.execute(
            "SELECT status FROM ingest_jobs WHERE id = ?", (job_id,)).fetchone()
        assert row[0] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _counts(workspace.store) == (0, 0)  # killed mid-embedding: nothing half-written
    # a fresh start (a new queue on the file) marks it interrupted, bytes kept
    restarted = Workspace(workspace.settings)
    restarted.__dict__["embedder"] = workspace.embedder
    try:
        job = restarted.job(job_id)
        assert job.status == "interrupted" and job.resumable
        assert "resume" in job.message.lower()
        restarted.resume(job_id)
        restarted.start_worker()
        [done] = restarted.job_queue.wait([job_id], timeout=WAIT_S)
        assert done.status == "done"
        assert _counts(restarted.store) == (1, done.chunks_total)
    finally:
        restarted.close()


def test_a_live_peer_keeps_its_running_job(workspace):
    """recover() leaves alone a job whose owner is alive: this very process, another queue."""
    [job] = workspace.submit([("a.md", TEXT)])
    assert workspace.job_queue.claim().id == job.id
    peer = open_store(workspace.settings)
    try:
        other = JobQueue(peer, workspace.settings, lambda: workspace.embedder)
        assert other.recover() == []
        assert workspace.job(job.id).status == "running"
    finally:
        peer.close()


def test_cli_ingest_is_a_recorded_job(tmp_path, settings, capsys):
    note = tmp_path / "note.md"
    note.write_bytes(TEXT)
    db = settings.database_url or settings.db_path
    code = cli_main(["ingest", str(note), "--db", db, "--embedder", "local"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert '"type":"done"' in lines[-1].replace(" ", "")
    ws = Workspace(settings)
    try:
        [job] = ws.jobs()
        assert (job.name, job.status, job.batch_size) == ("note.md", "done", 1)
        assert job.document_id == ws.documents()[0].id
    finally:
        ws.close()


def _job(**changes) -> Job:
    base = dict(id="j", batch_id="b", position=1, batch_size=1, name="n", mime=None, size=1,
                status="running", stage="extracting", pages_done=0, pages_total=100,
                chunks_done=0, chunks_total=0, reason=None, message="", document_id=None,
                duplicate=False, cancel_requested=False, owner=None, heartbeat=None,
                created="2026-01-01T00:00:00+00:00", started="2026-01-01T00:00:00+00:00",
                finished=None)
    return Job(**{**base, **changes})


def test_estimate_follows_the_pace_so_far():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert _job(pages_done=1).eta(start + timedelta(seconds=1)) is None  # too early
    halfway = _job(stage="embedding", pages_done=100, chunks_done=50, chunks_total=100)
    share = halfway.fraction
    assert 0.5 < share < 1
    assert halfway.eta(start + timedelta(seconds=60)) == pytest.approx(60 * (1 - share) / share)
    assert _job(status="done").eta(start) is None
    assert _job(status="queued").fraction == 0.0


def test_job_views_poll_fast_only_while_a_job_is_queued_or_running(workspace):
    from marginalia_app.ingest_view import JOB_IDLE_POLL_S, JOB_POLL_S, poll_interval

    assert poll_interval(workspace.jobs()) == JOB_IDLE_POLL_S  # no worker: the job stays queued
    job = workspace.submit([("a.txt", b"A note about vellum and quires.")])[0]
    assert poll_interval(workspace.jobs()) == JOB_POLL_S
    workspace.cancel(job.id)
    assert poll_interval(workspace.jobs()) == JOB_IDLE_POLL_S
    assert JOB_POLL_S < JOB_IDLE_POLL_S


ENDED = "ended before it was seen embedding"
BOOK_PAGES = (12, 48, 160)  # a longer book when the job ended before the child looked
APP_LIKE_CHILD = f"""
import sys, time
ENDED = {ENDED!r}
from marginalia_core.config import Settings
from marginalia_core.workspace import Workspace
sys.path.insert(0, sys.argv[3])
from pdf_maker import long_pdf
ws = Workspace(Settings(db_path=sys.argv[1], embedder="local", answerer="extractive"))
ws.start_worker()
[job] = ws.submit([("book.pdf", long_pdf(int(sys.argv[2])))])
while (seen := ws.job(job.id)).stage != "embedding":
    if not seen.active:  # on a busy machine the book may be indexed between two looks
        print(ENDED, flush=True)
        raise SystemExit(3)
    time.sleep(0.02)
print(job.id, flush=True)
while True:  # the main thread waits, as Streamlit's server loop does, until Ctrl-C
    time.sleep(0.2)
"""


@pytest.mark.sqlite_only
def test_ctrl_c_while_indexing_exits_cleanly_and_the_job_resumes(db_path, local_embedder):
    """Ctrl-C on ``make run`` mid-embedding used to abort the process in onnxruntime
    ("terminate called without an active exception", SIGABRT) and leave the job "running". Now
    the process exits normally, the job is interrupted with its upload kept, and resumes."""
    from conftest import ROOT

    from marginalia_core.config import Settings

    for pages in BOOK_PAGES:
        path = db_path.with_name(f"book-{pages}-{db_path.name}")  # a fresh library each time
        child = subprocess.Popen(
            [sys.executable, "-c", APP_LIKE_CHILD, str(path), str(pages), str(ROOT / "tests")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=offline_cli_env(),
            cwd=ROOT,
        )
        try:
            # never block for ever on a child that prints nothing
            ready, _, _ = select.select([child.stdout], [], [], WAIT_S)
            job_id = child.stdout.readline().strip() if ready else ""
            assert job_id, f"the child said nothing in {WAIT_S} s"
            if job_id == ENDED:
                child.communicate(timeout=WAIT_S)
                continue
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=WAIT_S)
            break
        finally:
            if child.poll() is None:
                child.kill()
    else:
        pytest.fail(f"every book, up to {pages} pages, was indexed before the child looked")
    assert "terminate called" not in err and child.returncode != -signal.SIGABRT, err[-2000:]
    assert "KeyboardInterrupt" in err  # Python's own report of the Ctrl-C, nothing worse
    ws = Workspace(Settings(db_path=str(path), embedder="local", answerer="extractive"))
    ws.__dict__["embedder"] = local_embedder
    try:
        job = ws.job(job_id)
        assert job.status == "interrupted" and job.resumable, job
        [again] = ws.resume(job_id)
        done = list(ws.job_queue.run(ws.job_queue.claim().id))[-1]
        assert again.id == job_id and done["type"] == "done"
        assert ws.job(job_id).status == "done"
    finally:
        ws.close()



def test_clearing_a_batch_forgets_its_outcomes_but_keeps_a_file_awaiting_its_password(workspace):
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(["A locked gloss about vellum."])))
    writer.encrypt("pw-for-the-clear-test")
    buffer = io.BytesIO()
    writer.write(buffer)
    workspace.start_worker()
    batch = workspace.submit([("notes.txt", TEXT), ("broken.pdf", b"%PDF-1.4 cut short"),
                              ("locked.pdf", buffer.getvalue())])
    [other] = workspace.submit([("other.txt", TEXT + b" Another book entirely.")])
    ended = workspace.job_queue.wait([j.id for j in (*batch, other)], timeout=WAIT_S)
    assert [j.status for j in ended] == ["done", "refused", "refused", "done"]

    assert workspace.clear_finished_jobs(batch[0].batch_id) == 2
    left = {j.name: j for j in workspace.jobs()}
    assert set(left) == {"locked.pdf", "other.txt"}  # the other batch is untouched
    assert left["locked.pdf"].needs_password  # its upload still waits for the password
    assert {d.name for d in workspace.documents()} == {"other.txt", "notes.txt"}  # kept
