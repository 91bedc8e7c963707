"""The ``ingest_jobs`` table (migrations m009 / p004) behind store methods: portable SQL (qmark
parameters, rows readable by name) that both backends inherit, so ``ingest.jobs`` keeps the
job logic and never speaks SQL.

A claim is a conditional ``UPDATE ... WHERE id = ? AND status = 'queued'`` whose row count says
who won, so of several processes sharing one database only one runs a job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from marginalia_core.store.rows import now_iso

JOB_COLUMNS = (
    "id, batch_id, position, batch_size, name, mime, size, status, stage, pages_done, "
    "pages_total, chunks_done, chunks_total, reason, message, document_id, duplicate, "
    "cancel_requested, owner, heartbeat, created, started, finished"
)
_SELECT = f"SELECT {JOB_COLUMNS}, data IS NOT NULL AS has_data FROM ingest_jobs"
_OPEN = "('queued', 'running', 'interrupted')"
_INSERT_COLUMNS = ("id", "batch_id", "position", "batch_size", "name", "mime", "size", "data",
                   "status", "reason", "message", "owner", "heartbeat", "created", "started",
                   "finished")


class JobTable:
    """Mixed into ``Store`` and ``PostgresStore``; needs their ``conn`` and ``write()``."""

    @property
    def conn(self) -> Any:
        raise NotImplementedError

    def write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    # -- reading ------------------------------------------------------------------------------

    def list_jobs(self, *, ended_limit: int) -> list[dict[str, Any]]:
        """Queued, running and interrupted jobs (oldest first), then the ``ended_limit`` most
        recently ended ones (newest first)."""
        open_ = self.conn.execute(
            f"{_SELECT} WHERE status IN {_OPEN} ORDER BY created, position"
        ).fetchall()
        ended = self.conn.execute(
            f"{_SELECT} WHERE status NOT IN {_OPEN} "
            "ORDER BY COALESCE(finished, created) DESC LIMIT ?",
            (ended_limit,),
        ).fetchall()
        return [dict(r) for r in (*open_, *ended)]

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(f"{_SELECT} WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else dict(row)

    def running_jobs(self) -> list[dict[str, Any]]:
        """``{id, owner, heartbeat}`` of every running job (to find the orphaned ones)."""
        rows = self.conn.execute(
            "SELECT id, owner, heartbeat FROM ingest_jobs WHERE status = 'running'"
        ).fetchall()
        return [dict(r) for r in rows]

    def job_payload(self, job_id: str, owner: str) -> tuple[str, str | None, bytes] | None:
        """(name, mime, bytes) of a job ``owner`` is running, or None."""
        row = self.conn.execute(
            "SELECT name, mime, data FROM ingest_jobs WHERE id = ? AND status = 'running' "
            "AND owner = ?",
            (job_id, owner),
        ).fetchone()
        if row is None or row["data"] is None:
            return None
        return row["name"], row["mime"], bytes(row["data"])

    def job_cancel_requested(self, job_id: str) -> bool:
        row = self.conn.execute(
            "SELECT cancel_requested FROM ingest_jobs WHERE id = ?", (job_id,)
        ).fetchone()
        return bool(row and row[0])

    # -- changing -----------------------------------------------------------------------------

    def insert_jobs(self, jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert one batch in one transaction; the rows as inserted (read before the commit,
        so a worker's claim cannot show through). Missing columns are NULL."""
        columns = ", ".join(_INSERT_COLUMNS)
        marks = ", ".join("?" for _ in _INSERT_COLUMNS)
        with self.write() as conn:
            for job in jobs:
                conn.execute(f"INSERT INTO ingest_jobs ({columns}) VALUES ({marks})",
                             tuple(job.get(c) for c in _INSERT_COLUMNS))
            return [dict(conn.execute(f"{_SELECT} WHERE id = ?", (j["id"],)).fetchone())
                    for j in jobs]

    def cancel_job(self, job_id: str, message: str) -> bool:
        """A queued or interrupted job ends at once (bytes dropped), a running one is asked to
        stop, a refusal waiting for a password drops its bytes. False if none applied."""
        with self.write() as conn:
            dropped = conn.execute(
                "UPDATE ingest_jobs SET status = 'cancelled', data = NULL, finished = ?, "
                "message = ? WHERE id = ? AND status IN ('queued', 'interrupted')",
                (now_iso(), message, job_id),
            ).rowcount
            if not dropped:
                dropped = conn.execute(
                    "UPDATE ingest_jobs SET cancel_requested = 1 "
                    "WHERE id = ? AND status = 'running'",
                    (job_id,),
                ).rowcount
            if not dropped:
                dropped = conn.execute(
                    "UPDATE ingest_jobs SET data = NULL WHERE id = ? AND status = 'refused' "
                    "AND data IS NOT NULL",
                    (job_id,),
                ).rowcount
        return bool(dropped)

    def requeue_jobs(
        self, job_id: str | None, requeueable_reasons: Sequence[str],
        before_commit: Callable[[str], None] | None = None,
    ) -> list[str]:
        """Queue again an interrupted job with its bytes (or every one, without ``job_id``), or
        a refusal whose reason is in ``requeueable_reasons``; the ids queued.
        ``before_commit(id)`` runs for each inside the transaction (a worker may claim the job
        the moment it commits)."""
        reasons = ", ".join("?" for _ in requeueable_reasons) or "NULL"
        with self.write() as conn:
            if job_id is None:
                rows = conn.execute(
                    "SELECT id FROM ingest_jobs WHERE status = 'interrupted' AND data IS NOT NULL"
                ).fetchall()
                ids = [r[0] for r in rows]
            else:
                ids = [job_id]
            queued = []
            for jid in ids:
                changed = conn.execute(
                    "UPDATE ingest_jobs SET status = 'queued', stage = '', pages_done = 0, "
                    "pages_total = 0, chunks_done = 0, chunks_total = 0, reason = NULL, "
                    "message = '', cancel_requested = 0, owner = NULL, started = NULL, "
                    "finished = NULL WHERE id = ? AND data IS NOT NULL AND (status = "
                    f"'interrupted' OR (status = 'refused' AND reason IN ({reasons})))",
                    (jid, *requeueable_reasons),
                ).rowcount
                if changed:
                    queued.append(jid)
                    if before_commit is not None:
                        before_commit(jid)
        return queued

    def clear_finished_jobs(self, statuses: Sequence[str], batch_id: str | None = None) -> int:
        """Forget ended jobs; with ``batch_id`` only that batch's, and not those still holding
        an upload a person can act on (a password to give, a near-duplicate to replace)."""
        marks = ", ".join("?" for _ in statuses)
        sql = f"DELETE FROM ingest_jobs WHERE status IN ({marks})"
        params: tuple[Any, ...] = tuple(statuses)
        if batch_id is not None:
            sql += " AND batch_id = ? AND data IS NULL"
            params += (batch_id,)
        with self.write() as conn:
            count = conn.execute(sql, params).rowcount
        return int(count)

    def interrupt_job(
        self, job_id: str, message: str, still_dead: Callable[[str | None, str | None], bool]
    ) -> bool:
        """Mark a running job ``interrupted`` (bytes kept) if ``still_dead(owner, heartbeat)``
        holds inside the transaction: it may have finished, or been claimed again, meanwhile."""
        with self.write() as conn:
            row = conn.execute(
                "SELECT owner, heartbeat FROM ingest_jobs WHERE id = ? AND status = 'running'",
                (job_id,),
            ).fetchone()
            if row is None or not still_dead(row["owner"], row["heartbeat"]):
                return False
            conn.execute(
                "UPDATE ingest_jobs SET status = 'interrupted', finished = ?, message = ? "
                "WHERE id = ?",
                (now_iso(), message, job_id),
            )
        return True

    def claim_job(self, owner: str, *, candidates: int) -> str | None:
        """Give the oldest queued job to ``owner``; its id, or None. Exclusive across processes
        on both backends: the ``status = 'queued'`` guard makes the UPDATE change the row for
        one claimant only (SQLite serialises writers with ``BEGIN IMMEDIATE``; PostgreSQL makes
        a concurrent UPDATE of the same row wait, then re-check the guard and change nothing).
        A loser tries the next of ``candidates`` rather than idling while jobs wait."""
        rows = self.conn.execute(
            "SELECT id FROM ingest_jobs WHERE status = 'queued' ORDER BY created, position "
            "LIMIT ?",
            (candidates,),
        ).fetchall()
        for row in rows:
            now = now_iso()
            with self.write() as conn:
                claimed = conn.execute(
                    "UPDATE ingest_jobs SET status = 'running', owner = ?, started = ?, "
                    "heartbeat = ? WHERE id = ? AND status = 'queued'",
                    (owner, now, now, row["id"]),
                ).rowcount
            if claimed:
                return str(row["id"])
        return None

    def record_job_progress(self, job_id: str, values: dict[str, Any]) -> None:
        """Stage and counts of a running job; also its owner's heartbeat."""
        with self.write() as conn:
            conn.execute(
                "UPDATE ingest_jobs SET stage = :stage, pages_done = :pages_done, "
                "pages_total = :pages_total, chunks_done = :chunks_done, "
                "chunks_total = :chunks_total, heartbeat = :now WHERE id = :id",
                {**values, "now": now_iso(), "id": job_id},
            )

    def finish_job(
        self, job_id: str, owner: str, status: str, values: dict[str, Any], *, keep_data: bool
    ) -> None:
        """Record how a job ended; its bytes go unless ``keep_data``."""
        with self.write() as conn:
            conn.execute(
                "UPDATE ingest_jobs SET status = :status, stage = :stage, "
                "pages_done = :pages_done, pages_total = :pages_total, "
                "chunks_done = :chunks_done, chunks_total = :chunks_total, reason = :reason, "
                "message = :message, document_id = :document_id, duplicate = :duplicate, "
                "finished = :now, heartbeat = :now, "
                "data = CASE WHEN :keep = 1 THEN data ELSE NULL END "
                "WHERE id = :id AND status = 'running' AND owner = :owner",
                {**values, "status": status, "keep": int(keep_data), "now": now_iso(),
                 "id": job_id, "owner": owner},
            )
