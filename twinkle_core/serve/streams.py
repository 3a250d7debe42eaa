"""A job's live events for server-sent events: its state changes, its output and its metric rows, each event
carrying a cursor (``"<transition>.<log byte>.<metric row>"``) that ``Last-Event-ID`` resumes after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from twinkle_core.serve.run_files import metric_rows, metrics_version, read_log

POLL_SECONDS = 0.5
"""How often a stream looks for news."""


def parse_cursor(text: str | None) -> tuple[int, int, int]:
    """``(transition seq, log offset, metric rows)`` from an event id; zeros for none or a malformed one."""
    try:
        seq, offset, rows = (int(p) for p in (text or "").split("."))
        return max(0, seq), max(0, offset), max(0, rows)
    except ValueError:
        return 0, 0, 0


def _json_event(name: str, payload: Any, cursor: str) -> dict[str, Any]:
    return {"event": name, "data": payload, "id": cursor}


class _Rows:
    """A stream's metric rows, parsed again only when their files changed."""

    def __init__(self) -> None:
        self.version: Any = None
        self.rows: list[dict[str, Any]] = []

    def read(self, logs_dir: str) -> list[dict[str, Any]]:
        """The rows in ``logs_dir``."""
        version = metrics_version(logs_dir)
        if version != self.version:
            self.version, self.rows = version, metric_rows(logs_dir)
        return self.rows


def _read(svc: Any, job_id: str, seq: int, offset: int,
          rows: _Rows) -> tuple[Any, list[dict[str, Any]], str, int, list[Any]]:
    """One look at the job (in a worker thread: files and SQLite block)."""
    job = svc.queue.get(job_id, transitions=False)
    transitions = svc.queue.transitions_after(job_id, seq)
    text, after = read_log(svc.config.home, job_id, offset)
    found = rows.read(svc.store.path(svc.store.run_id(job.run), "logs")) if job is not None and job.run else []
    return job, transitions, text, after, found


async def job_events(svc: Any, job_id: str, cursor: str | None, request: Request,
                     render: Callable[[str, Any, str], dict[str, Any]] = _json_event) -> AsyncIterator[dict[str, Any]]:
    """Events of ``job_id`` after ``cursor`` until the job has ended and everything is sent (then ``end``), or
    the client goes away. ``render(name, payload, cursor)`` shapes each event (default: JSON data)."""
    seq, offset, count = parse_cursor(cursor)
    metrics = _Rows()
    while True:
        job, transitions, text, after, rows = await run_in_threadpool(_read, svc, job_id, seq, offset, metrics)
        if job is None:
            return
        for change in transitions:
            seq = change["seq"]
            yield render("state", change, f"{seq}.{offset}.{count}")
        if text:
            offset = after
            yield render("log", {"text": text}, f"{seq}.{offset}.{count}")
        if len(rows) < count:  # a restarted run dropped the rows logged after its checkpoint
            count = 0
            yield render("reset", {"rows": len(rows)}, f"{seq}.{offset}.{count}")
        for row in rows[count:]:
            count += 1
            yield render("metric", row, f"{seq}.{offset}.{count}")
        if job.final and not transitions and not text:
            yield render("end", {"state": job.state, "reason": job.reason, "run": job.run}, f"{seq}.{offset}.{count}")
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_SECONDS)
