"""``JobQueue``: the service's job table — SQLite in WAL mode, safe for many processes, surviving ``kill -9``.

A job is a row: its request (JSON), its owner, its state and the worker holding it. Workers **claim** the
best queued job inside ``BEGIN IMMEDIATE`` (one writer at a time, so a job is never claimed twice) and hold it
by a **lease** they renew with ``JobQueue.heartbeat``. A worker that dies stops renewing; the next claim
finds the lease expired and puts the job back in the queue, to be resumed exactly from its last checkpoint.
Every change of state is a row in ``transitions`` with its time and reason, and every worker's last beat is in
``workers``, so the queue can say why a job waits (``JobQueue.pending_reason``).

States: ``queued → running → finished | failed | cancelled | stopped`` (a running job may also go back to
``queued``: its worker died, or the server stopped it to restart).
"""

from __future__ import annotations

import bisect
import json
import math
import socket
import sqlite3
import threading
import time
import uuid
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import from_json

from twinkle_core.errors import TwinkleError
from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.store.sqlite import Database
from twinkle_core.types import TextEnum

class JobState(TextEnum):
    """Where a service job is: waiting, training, or ended one of four ways."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"


STATES: tuple[str, ...] = tuple(state.value for state in JobState)
"""Every job state, as text; the last four are final."""
FINAL_STATES = frozenset((JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.STOPPED))
"""States a job never leaves."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    user TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    request TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    started REAL,
    finished REAL,
    worker TEXT,
    lease_until REAL,
    pid INTEGER,
    host TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    used_seconds REAL NOT NULL DEFAULT 0,
    cancel_requested TEXT,
    run TEXT,
    reason TEXT,
    result TEXT
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (state, priority, seq);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs (user, state);
CREATE INDEX IF NOT EXISTS jobs_user_newest ON jobs (user, seq);
CREATE INDEX IF NOT EXISTS jobs_newest ON jobs (seq);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    time REAL NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    worker TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions (job, seq);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    pid INTEGER,
    host TEXT,
    started REAL,
    beat REAL,
    job TEXT
);
"""

_CRASH_COLUMNS = ("SELECT id, worker, restarts, "
                  f"COALESCE(json_extract(request, '$.max_restarts'), {DEFAULT_MAX_RESTARTS}) AS allowed")
"""What deciding a crashed job's fate (``JobQueue._crashed``) reads of it."""


def finite(value: Any) -> Any:
    """``value`` with every float JSON cannot hold (NaN, an infinity: a diverged loss, say) as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_json(value: Any) -> str:
    """``value`` as strict JSON text (what the database holds, so that SQLite's JSON functions can read every
    row): floats JSON cannot hold are written as text (``finite``)."""
    return json.dumps(finite(value), allow_nan=False)


class JobRow(BaseModel):
    """One job as stored (``request`` is the submitted JSON, parsed) and, while it waits, why
    (``pending_reason``, filled in by ``JobQueue.explain``)."""

    id: str
    seq: int
    user: str
    state: JobState
    priority: int
    request: dict[str, Any]
    created: float
    updated: float
    started: float | None = None
    finished: float | None = None
    worker: str | None = None
    lease_until: float | None = None
    pid: int | None = None
    host: str | None = None
    attempts: int = 0
    restarts: int = 0
    used_seconds: float = 0.0
    cancel_requested: str | None = None
    run: str | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    transitions: list[dict[str, Any]] = Field(default_factory=list)
    pending_reason: str | None = None

    @property
    def final(self) -> bool:
        """Whether the job has ended."""
        return self.state in FINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return self.model_dump(mode="json")


_PARSED_ROWS = 4096
"""How many parsed rows a queue keeps (``JobQueue._row``): a page of the busiest listing many times over."""


def _parse(values: sqlite3.Row) -> JobRow:
    data = dict(values)
    data["request"] = from_json(data["request"])  # pydantic's parser: twice as fast as json.loads on a list's rows
    data["result"] = from_json(data["result"]) if data["result"] else None
    return JobRow.model_validate(data)


class JobQueue:
    """The job table in the SQLite file ``path`` (created with its folder on first use).

    Args:
        path: the database file.
        max_running_per_user: jobs of one user that may run at once (``None``: no limit).
    """

    def __init__(self, path: str, max_running_per_user: int | None = None) -> None:
        """Open (and create) the table."""
        self.path = path
        self.max_running_per_user = max_running_per_user
        self.db = Database(path, _SCHEMA)
        self._parsed: dict[tuple[Any, ...], JobRow] = {}
        self._read = threading.local()  # per thread: the claim order its connection read last (_claim_order)

    def _row(self, values: sqlite3.Row) -> JobRow:
        """The ``JobRow`` of a row as read. A row read before in exactly these values (every column, so any
        change of any column is a new row) is not parsed and validated again: listing a page of 50 jobs was a
        quarter of the API's time. Callers get a copy of their own (they set ``transitions``,
        ``pending_reason``)."""
        key = tuple(values)
        parsed = self._parsed.get(key)
        if parsed is None:
            if len(self._parsed) >= _PARSED_ROWS:
                self._parsed.clear()  # a bounded memory; the next reads fill it again
            parsed = self._parsed[key] = _parse(values)
        return parsed.model_copy()

    @staticmethod
    def _transition(conn: sqlite3.Connection, job: str, state: str, reason: str | None, worker: str | None = None,
                    now: float | None = None) -> None:
        conn.execute("INSERT INTO transitions (job, time, state, reason, worker) VALUES (?, ?, ?, ?, ?)",
                     (job, now or time.time(), state, reason, worker))

    # ------------------------------------------------------------------ submit and read
    def submit(self, user: str, request: dict[str, Any], priority: int = 0, max_queued: int | None = None) -> JobRow:
        """Queue a job for ``user``; returns it.

        Raises:
            QueueFullError: ``user`` already has ``max_queued`` jobs waiting.
        """
        now = time.time()
        job_id = uuid.uuid4().hex[:12]
        with self.db.write() as conn:
            if max_queued is not None:
                waiting = conn.execute("SELECT COUNT(*) FROM jobs WHERE user = ? AND state = 'queued'",
                                       (user,)).fetchone()[0]
                if waiting >= max_queued:
                    raise QueueFullError(f"{user} already has {waiting} queued jobs (the server's limit is "
                                         f"{max_queued}); wait for some to start or cancel one")
            seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            conn.execute(
                "INSERT INTO jobs (id, seq, user, state, priority, request, created, updated) "
                "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?)",
                (job_id, seq, user, priority, json.dumps(request, allow_nan=False), now, now))
            self._transition(conn, job_id, "queued", "submitted", now=now)
        return self.get(job_id)  # type: ignore[return-value]

    def get(self, job_id: str, transitions: bool = True) -> JobRow | None:
        """The job ``job_id`` (with its transitions), or ``None``."""
        with self.db.connect() as conn:
            found = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if found is None:
                return None
            job = self._row(found)
            if transitions:
                job.transitions = [dict(r) for r in conn.execute(
                    "SELECT seq, time, state, reason, worker FROM transitions WHERE job = ? ORDER BY seq", (job_id,))]
        return job

    def list(self, user: str | None = None, state: str | None = None, algorithm: str | None = None,
             limit: int = 200, offset: int = 0) -> list[JobRow]:
        """Jobs, newest first, filtered by owner, state and algorithm."""
        clauses, args = [], []
        for column, value in (("user", user), ("state", state)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if algorithm is not None:
            clauses.append("json_extract(request, '$.algorithm') = ?")
            args.append(algorithm)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.db.connect() as conn:
            rows = conn.execute(f"SELECT * FROM jobs {where} ORDER BY seq DESC LIMIT ? OFFSET ?",  # noqa: S608
                                (*args, limit, offset)).fetchall()
        return [self._row(r) for r in rows]

    def transitions_after(self, job_id: str, seq: int) -> list[dict[str, Any]]:
        """The job's transitions with a sequence number above ``seq``."""
        with self.db.connect() as conn:
            return [dict(r) for r in conn.execute(
                "SELECT seq, time, state, reason, worker FROM transitions WHERE job = ? AND seq > ? ORDER BY seq",
                (job_id, seq))]

    def counts(self, user: str | None = None) -> dict[str, int]:
        """Jobs per state: ``user``'s, or (``None``) every user's."""
        with self.db.connect() as conn:
            if user is None:
                found = dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
            else:
                found = dict(conn.execute("SELECT state, COUNT(*) FROM jobs WHERE user = ? GROUP BY state",
                                          (user,)).fetchall())
        return {state: found.get(state, 0) for state in STATES}

    # ------------------------------------------------------------------ workers
    def worker_beat(self, worker: str, job: str | None, pid: int | None = None) -> None:
        """Record that ``worker`` is alive (and which job it holds)."""
        now = time.time()
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO workers (id, pid, host, started, beat, job) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET beat = excluded.beat, job = excluded.job, "
                "pid = COALESCE(excluded.pid, workers.pid)",
                (worker, pid, socket.gethostname(), now, now, job))

    def worker_gone(self, worker: str) -> None:
        """Remove ``worker`` from the table (it stopped)."""
        with self.db.write() as conn:
            conn.execute("DELETE FROM workers WHERE id = ?", (worker,))

    def workers(self, stale_after: float) -> list[dict[str, Any]]:
        """Workers that beat within the last ``stale_after`` seconds."""
        with self.db.connect() as conn:
            return [dict(r) for r in conn.execute("SELECT * FROM workers WHERE beat >= ? ORDER BY id",
                                                  (time.time() - stale_after,))]

    # ------------------------------------------------------------------ claiming and leases
    def claim(self, worker: str, lease_seconds: float) -> JobRow | None:
        """Requeue jobs whose lease expired, then give ``worker`` the best queued job it may run (highest
        priority, then oldest; skipping users at their running limit) under a lease; ``None`` when none."""
        now = time.time()
        with self.db.write() as conn:
            self._requeue_expired(conn, now)
            limit = self.max_running_per_user
            busy = "" if limit is None else (
                "AND user NOT IN (SELECT user FROM jobs WHERE state = 'running' GROUP BY user HAVING COUNT(*) >= ?)")
            found = conn.execute(
                f"SELECT id FROM jobs WHERE state = 'queued' {busy} ORDER BY priority DESC, seq LIMIT 1",  # noqa: S608
                () if limit is None else (limit,)).fetchone()
            if found is None:
                return None
            conn.execute(
                "UPDATE jobs SET state = 'running', worker = ?, lease_until = ?, host = ?, pid = NULL, "
                "attempts = attempts + 1, started = COALESCE(started, ?), updated = ?, reason = NULL WHERE id = ?",
                (worker, now + lease_seconds, socket.gethostname(), now, now, found["id"]))
            job = conn.execute("SELECT attempts FROM jobs WHERE id = ?", (found["id"],)).fetchone()
            self._transition(conn, found["id"], "running", f"claimed by {worker} (attempt {job['attempts']})", worker,
                             now)
        return self.get(found["id"])

    def _requeue_expired(self, conn: sqlite3.Connection, now: float) -> None:
        for job in conn.execute(f"{_CRASH_COLUMNS} FROM jobs WHERE state = 'running' AND lease_until < ?",  # noqa: S608
                                (now,)).fetchall():
            self._crashed(conn, job, f"worker {job['worker']} stopped renewing its lease (it died)", now)

    def _crashed(self, conn: sqlite3.Connection, job: Any, what: str, now: float) -> None:
        """The job's worker died (``what`` says how it was seen): queue the job to resume from its last checkpoint,
        or fail it once it has taken its worker down more often than its ``max_restarts``."""
        if job["restarts"] >= job["allowed"]:  # it keeps taking its worker down with it: stop trying
            reason = f"{what} again; gave up after {job['restarts']} restart(s)"
            conn.execute("UPDATE jobs SET state = 'failed', reason = ?, finished = ?, updated = ?, worker = NULL, "
                         "lease_until = NULL, pid = NULL WHERE id = ?", (reason, now, now, job["id"]))
            self._transition(conn, job["id"], "failed", reason, now=now)
            return
        self._back_to_queue(conn, job["id"], f"{what}; the job resumes from its last checkpoint", now, crashed=True)

    def held_by(self, worker: str) -> list[JobRow]:
        """The jobs ``worker`` runs now."""
        with self.db.connect() as conn:
            return [self._row(r) for r in conn.execute("SELECT * FROM jobs WHERE state = 'running' AND worker = ?",
                                                   (worker,))]

    def worker_died(self, worker: str, how: str) -> None:
        """``worker``'s process was seen to end (``how``: its exit status, in words): the jobs it held go back in the
        queue now — not when their lease runs out, which stays the fallback for a worker nobody watches — and it
        leaves the workers table. Stop their training processes first (``held_by``, ``pid``)."""
        now = time.time()
        with self.db.write() as conn:
            for job in conn.execute(f"{_CRASH_COLUMNS} FROM jobs WHERE state = 'running' AND worker = ?",  # noqa: S608
                                    (worker,)).fetchall():
                self._crashed(conn, job, f"worker {worker} died ({how}); the server requeued the job at once", now)
            conn.execute("DELETE FROM workers WHERE id = ?", (worker,))

    def _back_to_queue(self, conn: sqlite3.Connection, job_id: str, reason: str, now: float, crashed: bool) -> None:
        """Queue the job again to resume — or, when a cancel was asked for meanwhile, end it ``cancelled``."""
        by = conn.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
        if by:
            reason = f"cancelled by {by} ({reason})"
            conn.execute("UPDATE jobs SET state = 'cancelled', reason = ?, finished = ?, updated = ?, worker = NULL, "
                         "lease_until = NULL, pid = NULL WHERE id = ?", (reason, now, now, job_id))
            self._transition(conn, job_id, "cancelled", reason, now=now)
            return
        conn.execute(
            "UPDATE jobs SET state = 'queued', worker = NULL, lease_until = NULL, pid = NULL, reason = ?, "
            "restarts = restarts + ?, updated = ? WHERE id = ?", (reason, 1 if crashed else 0, now, job_id))
        self._transition(conn, job_id, "queued", reason, now=now)

    def heartbeat(self, job_id: str, worker: str, lease_seconds: float) -> bool:
        """Renew ``worker``'s lease on ``job_id``; ``False`` when the worker no longer holds it (stop the job)."""
        with self.db.write() as conn:
            changed = conn.execute(
                "UPDATE jobs SET lease_until = ?, updated = ? WHERE id = ? AND worker = ? AND state = 'running'",
                (time.time() + lease_seconds, time.time(), job_id, worker)).rowcount
        return changed == 1

    def set_process(self, job_id: str, worker: str, pid: int, run: str | None = None) -> None:
        """Record the job's training process (its process group) and run, while ``worker`` holds it."""
        with self.db.write() as conn:
            conn.execute("UPDATE jobs SET pid = ?, run = COALESCE(?, run) WHERE id = ? AND worker = ?",
                         (pid, run, job_id, worker))

    def set_run(self, job_id: str, run: str) -> None:
        """Record the run the job trains."""
        with self.db.write() as conn:
            conn.execute("UPDATE jobs SET run = ? WHERE id = ?", (run, job_id))

    def release(self, job_id: str, worker: str, state: str, reason: str, *, used_seconds: float = 0.0,
                result: dict[str, Any] | None = None, run: str | None = None, crashed: bool = False) -> bool:
        """End ``worker``'s hold on ``job_id``: a final state, or ``queued`` again (to resume). Applies only
        while ``worker`` still holds the job — a worker that lost its lease changes nothing. Returns whether
        it applied."""
        if state not in STATES or state == "running":
            raise ValueError(f"cannot release a job into state {state!r}")
        now = time.time()
        with self.db.write() as conn:
            held = conn.execute("SELECT 1 FROM jobs WHERE id = ? AND worker = ? AND state = 'running'",
                                (job_id, worker)).fetchone()
            if held is None:
                return False
            conn.execute("UPDATE jobs SET used_seconds = used_seconds + ?, run = COALESCE(?, run) WHERE id = ?",
                         (used_seconds, run, job_id))
            if state == "queued":
                self._back_to_queue(conn, job_id, reason, now, crashed)
            else:
                conn.execute(
                    "UPDATE jobs SET state = ?, reason = ?, result = ?, finished = ?, updated = ?, worker = NULL, "
                    "lease_until = NULL, pid = NULL WHERE id = ?",
                    (state, reason, strict_json(result) if result is not None else None, now, now, job_id))
                self._transition(conn, job_id, state, reason, worker, now)
        return True

    def request_cancel(self, job_id: str, by: str) -> JobRow:
        """Cancel ``job_id``: a queued job now; a running one is asked to stop (its worker sends SIGTERM, waits
        the grace period, then SIGKILL). A job that has ended is returned unchanged."""
        now = time.time()
        with self.db.write() as conn:
            job = conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if job is not None and job["state"] == "queued":
                reason = f"cancelled by {by} before it started"
                conn.execute("UPDATE jobs SET state = 'cancelled', reason = ?, finished = ?, updated = ?, "
                             "cancel_requested = ? WHERE id = ?", (reason, now, now, by, job_id))
                self._transition(conn, job_id, "cancelled", reason, now=now)
            elif job is not None and job["state"] == "running":
                conn.execute("UPDATE jobs SET cancel_requested = ?, updated = ? WHERE id = ?", (by, now, job_id))
        return self.get(job_id)  # type: ignore[return-value]

    def recover(self, reason: str) -> list[JobRow]:
        """Put every ``running`` job back in the queue (the server restarted: nobody holds them any more);
        returns them as they were, so their processes can be stopped."""
        now = time.time()
        with self.db.write() as conn:
            orphans = [self._row(r) for r in conn.execute("SELECT * FROM jobs WHERE state = 'running'").fetchall()]
            for job in orphans:
                self._back_to_queue(conn, job.id, reason, now, crashed=False)
            conn.execute("DELETE FROM workers")
        return orphans

    # ------------------------------------------------------------------ why a job waits
    def pending_reason(self, job: JobRow, workers: int) -> str | None:
        """Why a queued job has not started, in words (``None`` for a job that is not queued)."""
        return self.pending_reasons([job], workers)[job.id]

    def explain(self, jobs: list[JobRow], workers: int) -> list[JobRow]:
        """``jobs``, each queued one with its ``JobRow.pending_reason`` set; returns them."""
        reasons = self.pending_reasons(jobs, workers)
        for job in jobs:
            job.pending_reason = reasons[job.id]
        return jobs

    def pending_reasons(self, jobs: list[JobRow], workers: int) -> dict[str, str | None]:
        """``pending_reason`` of each job, from one look at the queue."""
        if not any(job.state == "queued" for job in jobs):
            return {job.id: None for job in jobs}
        with self.db.connect() as conn:
            per_user, order = self._claim_order(conn)
        running = sum(per_user.values())
        return {job.id: self._reason(job, workers, running, per_user.get(job.user, 0),
                                     bisect.bisect_left(order, (-job.priority, job.seq)))
                if job.state == "queued" else None for job in jobs}

    def _claim_order(self, conn: sqlite3.Connection) -> tuple[dict[str, int], list[tuple[int, int]]]:
        """Running jobs per user, and the queued jobs' ``(-priority, seq)`` in claim order — read again only when
        the queue changed since this connection last read them (a listing of an idle queue reads them once)."""
        version = self.db.version(conn)
        kept = getattr(self._read, "claim_order", None)
        if kept is not None and kept[0] is conn and kept[1] == version:
            return kept[2], kept[3]
        per_user = dict(conn.execute("SELECT user, COUNT(*) FROM jobs WHERE state = 'running' GROUP BY user"))
        plain = conn.cursor()
        plain.row_factory = None  # plain tuples, sorted in C into claim order (no Row objects, no Python loop)
        order = sorted(plain.execute("SELECT -priority, seq FROM jobs WHERE state = 'queued'"))
        self._read.claim_order = (conn, version, per_user, order)
        return per_user, order

    def _reason(self, job: JobRow, workers: int, running: int, mine: int, ahead: int) -> str:
        parts = []
        if job.reason and job.reason != "submitted":
            parts.append(f"requeued: {job.reason}")
        limit = self.max_running_per_user
        if limit is not None and mine >= limit:
            parts.append(f"{job.user} has {mine} job(s) running, the per-user limit is {limit}")
        elif workers == 0:
            parts.append("no worker is running (start the server with --workers N)")
        elif running >= workers:
            parts.append(f"all {workers} worker(s) are busy; {ahead} job(s) are ahead of it")
        elif ahead:
            parts.append(f"{ahead} job(s) are ahead of it")
        else:
            parts.append("next: a worker is about to claim it")
        return "; ".join(parts)


class QueueFullError(TwinkleError):
    """A user has as many queued jobs as the server allows."""
