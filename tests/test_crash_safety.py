"""Crash safety: ``kill -9`` of a real ``python -m marginalia_core ingest`` in the middle of a batch.

Each kill leaves a database that opens, passes ``PRAGMA integrity_check`` (and the FTS5 index's own
integrity check), holds no half-indexed document (``chunk_count`` equals the stored chunks, every
chunk has a full-size embedding, FTS rows == chunk rows, no orphans) and keeps every document whose
``done`` line was printed before the kill. Re-running the same command then completes the batch
without duplicates: exit 0, already-indexed files reported as ``done`` with ``duplicate: true``.

Offline (local MiniLM embedder), real subprocesses, ``--db`` in ``tmp_path`` (or, on the
PostgreSQL backend, ``MARGINALIA_DATABASE_URL`` naming this test's own database). Files are small
(~200-character chunks) so one file embeds in ~1 s and a kill lands while ``embedding`` progress
is still streaming.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import offline_cli_env

from marginalia_core.providers.embeddings.local import BATCH_SIZE
from marginalia_core.store.base import is_postgres_url
from marginalia_core.store.sqlite import Store

pytestmark = pytest.mark.both_backends

try:
    from marginalia_core.store.postgres import PostgresStore
except ImportError:  # PostgreSQL runs are skipped then (conftest's pg_server)
    PostgresStore = None

ROOT = Path(__file__).resolve().parents[1]
LOCAL_DIM = 384
CHUNK_ARGS = ["--target", "200", "--overlap", "30"]
CLI_TIMEOUT_S = 120  # one whole batch run, generous for a loaded 2-core machine
EVENT_TIMEOUT_S = 60  # silence on stdout longer than this is a hang

# Figures reached, printed at the end of the module (run with -s to see them).
FIGURES: dict[str, object] = {}


# --------------------------------------------------------------------------------- helpers

def make_batch(folder: Path, files: int, paragraphs: int, seed: int = 7) -> list[Path]:
    """``files`` text files of unique prose (no two hash alike), ~``paragraphs`` chunks each at
    the 200-character target."""
    rng = random.Random(seed)
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(4000)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        paras = []
        for p in range(paragraphs):
            sentences = [
                " ".join(rng.choice(vocab) for _ in range(10)).capitalize() + "."
                for _ in range(2)
            ]
            paras.append(f"File {i} paragraph {p}. " + " ".join(sentences))
        path = folder / f"batch-{i:02d}.txt"
        path.write_text("\n\n".join(paras), encoding="utf-8")
        paths.append(path)
    return paths


def ingest_cmd(db: Path | str, files: list[Path]) -> list[str]:
    where = [] if is_postgres_url(str(db)) else ["--db", str(db)]
    return [
        sys.executable, "-m", "marginalia_core", "ingest", *map(str, files),
        *where, "--embedder", "local", "--answerer", "extractive", *CHUNK_ARGS,
    ]


def cli_env(db: Path | str) -> dict[str, str]:
    env = offline_cli_env()
    if is_postgres_url(str(db)):
        env["MARGINALIA_DATABASE_URL"] = str(db)
    return env


@pytest.fixture
def target(store_backend, tmp_path, request) -> Path | str:
    """Where the killed runs write: a SQLite file, or a PostgreSQL database's URL."""
    if store_backend == "postgres":
        return request.getfixturevalue("pg_database")
    return tmp_path / "crash.db"


class Run:
    """A running ``ingest`` subprocess whose NDJSON stdout is read line by line."""

    def __init__(self, db: Path, files: list[Path]):
        self.proc = subprocess.Popen(
            ingest_cmd(db, files), cwd=ROOT, env=cli_env(db), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.events: list[dict] = []
        self._lines: queue.Queue = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def next_event(self) -> dict | None:
        line = self._lines.get(timeout=EVENT_TIMEOUT_S)
        if line is None:
            return None
        event = json.loads(line)  # every stdout line is one JSON object
        self.events.append(event)
        return event

    def kill_when(self, predicate: Callable[[dict, list[dict]], bool]) -> dict | None:
        """Read events until ``predicate(event, events_so_far)``; then SIGKILL. Returns the event
        it fired on, or None when the run ended first."""
        while True:
            event = self.next_event()
            if event is None:
                self.proc.wait(timeout=CLI_TIMEOUT_S)
                return None
            if predicate(event, self.events):
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
                return event

    def finish(self) -> int:
        while self.next_event() is not None:
            pass
        return self.proc.wait(timeout=CLI_TIMEOUT_S)


def new_dones(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "done" and not e.get("duplicate")]


def check_pg_database(url: str, batch: list[Path]) -> dict[str, int]:
    """``check_database`` for PostgreSQL (its WAL replays a killed client's nothing: the
    transaction simply never committed); same invariants through the store and plain SQL."""
    store = PostgresStore(url)
    try:
        report = store.integrity_report()
        assert report == {"integrity": "ok", "mismatched_documents": [],
                          "chunks_without_embedding": 0, "orphan_chunks": 0}, report
        raw = store.raw
        assert raw.execute(
            "SELECT COUNT(*) FROM chunks WHERE vector_dims(embedding) != %s", (LOCAL_DIM,)
        ).fetchone()[0] == 0
        assert raw.execute("SELECT COUNT(*) FROM chunks WHERE tsv IS NULL").fetchone()[0] == 0
        gaps = raw.execute(
            "SELECT d.name FROM documents d JOIN chunks c ON c.document_id = d.id GROUP BY d.id "
            "HAVING MIN(c.idx) != 0 OR MAX(c.idx) != d.chunk_count - 1 "
            "OR COUNT(DISTINCT c.idx) != d.chunk_count"
        ).fetchall()
        assert gaps == []
        rows = raw.execute("SELECT name, chunk_count FROM documents").fetchall()
    finally:
        store.close()
    return stored_documents(rows, batch)


def stored_documents(rows: list, batch: list[Path]) -> dict[str, int]:
    """{name: chunk_count} of the stored documents, each once, each from the batch, none empty."""
    names = [r[0] for r in rows]
    assert len(names) == len(set(names)), "a document was stored twice"
    assert set(names) <= {p.name for p in batch}
    assert all(count > 0 for _, count in rows)
    return dict(rows)


def check_database(db: Path | str, batch: list[Path]) -> dict[str, int]:
    """Everything a kill must never break. Returns {name: chunk_count} of what is stored."""
    if is_postgres_url(str(db)):
        return check_pg_database(str(db), batch)
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        # FTS5's own check: the index matches the chunks table it is built from
        raw.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        chunks = raw.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        fts_rows = raw.execute("SELECT COUNT(*) FROM chunks_fts_docsize").fetchone()[0]
        assert fts_rows == chunks, f"FTS holds {fts_rows} rows for {chunks} chunks"
        bad_vectors = raw.execute(
            "SELECT COUNT(*) FROM chunks WHERE embedding IS NULL OR length(embedding) != ?",
            (LOCAL_DIM * 4,),
        ).fetchone()[0]
        assert bad_vectors == 0
        # chunk idx of each document are exactly 0..chunk_count-1
        gaps = raw.execute(
            "SELECT d.name FROM documents d JOIN chunks c ON c.document_id = d.id GROUP BY d.id "
            "HAVING MIN(c.idx) != 0 OR MAX(c.idx) != d.chunk_count - 1 "
            "OR COUNT(DISTINCT c.idx) != d.chunk_count"
        ).fetchall()
        assert gaps == []
        rows = raw.execute("SELECT name, chunk_count FROM documents").fetchall()
    finally:
        raw.close()
    store = Store(db)  # opens (and migrates) like the app would
    try:
        report = store.integrity_report()
        assert report == {
            "integrity": "ok",
            "mismatched_documents": [],
            "chunks_without_embedding": 0,
            "orphan_chunks": 0,
        }, report
    finally:
        store.close()
    return stored_documents(rows, batch)


def rerun_to_completion(db: Path, batch: list[Path], already: dict[str, int]) -> list[dict]:
    run = Run(db, batch)
    code = run.finish()
    assert "Traceback" not in run.stderr
    assert code == 0, run.stderr
    finals = [e for e in run.events if e["type"] in ("done", "error")]
    assert [e["type"] for e in finals] == ["done"] * len(batch), finals
    by_file = {e["file"]: e for e in finals}
    for name in already:
        assert by_file[name]["duplicate"] is True, f"{name} was indexed again"
    for path in batch:
        if path.name not in already:
            assert by_file[path.name]["duplicate"] is False
    stored = check_database(db, batch)
    assert sorted(stored) == sorted(p.name for p in batch)
    return run.events


# Kill points: (label, predicate over (event, events of this run)).
def _embedding_mid_file(after_new_dones: int):
    def predicate(event: dict, events: list[dict]) -> bool:
        return (
            len(new_dones(events)) >= after_new_dones
            and event.get("stage") == "embedding"
            and 0 < event.get("done", 0) < event.get("total", 0)
        )
    return predicate


def _at_storing(after_new_dones: int):
    def predicate(event: dict, events: list[dict]) -> bool:
        return len(new_dones(events)) >= after_new_dones and event.get("stage") == "storing"
    return predicate


def _right_after_done(after_new_dones: int):
    def predicate(event: dict, events: list[dict]) -> bool:
        return event["type"] == "done" and len(new_dones(events)) >= after_new_dones
    return predicate


def _first_embedding_event(event: dict, events: list[dict]) -> bool:
    return event.get("stage") == "embedding" and event.get("done") == 0


def kill_chain(db: Path, batch: list[Path], points: list[tuple[str, Callable]]) -> list[dict]:
    """Run the batch, kill it at each point in turn (each run resumes the previous one), check
    the database after every kill, then rerun to completion."""
    results = []
    stored: dict[str, int] = {}
    for label, predicate in points:
        started = time.monotonic()
        run = Run(db, batch)
        fired = run.kill_when(predicate)
        assert fired is not None, f"the run ended before kill point {label!r}"
        assert run.proc.returncode == -signal.SIGKILL
        committed = {e["file"] for e in run.events if e["type"] == "done"}
        after = check_database(db, batch)
        # durability: a document reported done before the kill is there, whole
        assert committed <= set(after), f"lost {committed - set(after)} after {label}"
        for name, count in stored.items():
            assert after[name] == count
        # the file being worked on when killed is either absent or complete (never partial)
        in_flight = fired.get("file")
        results.append({
            "point": label,
            "killed_on": f"{fired['type']}:{fired.get('stage', '')} {in_flight} "
                         f"{fired.get('done', '')}/{fired.get('total', '')}".strip(),
            "documents_after": len(after),
            "in_flight_committed": in_flight in after,
            "seconds": round(time.monotonic() - started, 2),
        })
        stored = after
    started = time.monotonic()
    rerun_to_completion(db, batch, stored)
    results.append({"point": "rerun", "seconds": round(time.monotonic() - started, 2)})
    return results


# ----------------------------------------------------------------------------------- tests

def test_kill_during_embedding_then_rerun_completes(tmp_path, target):
    """One kill point (after the first ``done``, while the second file's embedding streams)."""
    # enough chunks for two embedding batches, so the second file has a mid-embedding point
    batch = make_batch(tmp_path / "docs", files=2, paragraphs=BATCH_SIZE + 6)
    db = target
    results = kill_chain(db, batch, [("embedding file 2", _embedding_mid_file(1))])
    assert results[0]["documents_after"] == 1
    assert results[0]["in_flight_committed"] is False
    FIGURES[f"fast {'postgres' if is_postgres_url(str(db)) else 'sqlite'}"] = results


@pytest.mark.slow
def test_kill_at_several_points_mid_batch(tmp_path, target):
    """7 files of ~25 chunks; kill -9 at five points, each run resuming the last, then rerun."""
    batch = make_batch(tmp_path / "docs", files=7, paragraphs=24, seed=11)
    db = target
    points = [
        ("first embedding event of file 1 (empty database)", _first_embedding_event),
        ("embedding mid-file, after the first done", _embedding_mid_file(1)),
        ("right after a done (commit just returned)", _right_after_done(1)),
        ("at the storing stage (commit racing the kill)", _at_storing(1)),
        ("embedding mid-file, later in the batch", _embedding_mid_file(1)),
    ]
    results = kill_chain(db, batch, points)
    assert results[0]["documents_after"] == 0
    FIGURES[f"slow {'postgres' if is_postgres_url(str(db)) else 'sqlite'}"] = results


def test_kill_before_first_commit_leaves_a_valid_empty_database(tmp_path):
    """A database killed before anything was committed is still a valid, empty database."""
    batch = make_batch(tmp_path / "docs", files=1, paragraphs=4)
    db = tmp_path / "fresh.db"
    run = Run(db, batch)
    fired = run.kill_when(lambda e, _: e.get("stage") == "extracting")
    assert fired is not None
    if db.exists():
        assert check_database(db, batch) == {}


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if FIGURES:
        print("\n[crash-safety figures]")
        for key, rows in FIGURES.items():
            for row in rows:
                print(f"  {key}: {row}")
