"""A job's live events for server-sent events: its state changes, its output and its metric rows, each event
carrying a cursor (``"<transition>.<log byte>.<metric row>"``) that ``Last-Event-ID`` resumes after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from twinkle_core.serve.records import metric_rows, read_log

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


def _read(svc: Any, job_id: str, seq: int, offset: int) -> tuple[Any, list[dict[str, Any]], str, int, list[Any]]:
    """One look at the job (in a worker thread: files and SQLite block)."""
    from twinkle_core.store.runs import RunStore

    job = svc.queue.get(job_id, transitions=False)
    transitions = svc.queue.transitions_after(job_id, seq)
    text, after = read_log(svc.config.home, job_id, offset)
    rows: list[Any] = []
    if job is not None and job.run:
        store = RunStore(svc.config.home)
        rows = metric_rows(store.path(store.run_id(job.run), "logs"))
    return job, transitions, text, after, rows


async def job_events(svc: Any, job_id: str, cursor: str | None, request: Request,
                     render: Callable[[str, Any, str], dict[str, Any]] = _json_event) -> AsyncIterator[dict[str, Any]]:
    """Events of ``job_id`` after ``cursor`` until the job has ended and everything is sent (then ``end``), or
    the client goes away. ``render(name, payload, cursor)`` shapes each event (default: JSON data)."""
    seq, offset, count = parse_cursor(cursor)
    while True:
        job, transitions, text, after, rows = await run_in_threadpool(_read, svc, job_id, seq, offset)
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
