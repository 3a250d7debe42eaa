"""Jobs: submit, list, read, cancel; a job's output, metric rows and live events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from twinkle_core.serve.api.errors import error_response, resource_router
from twinkle_core.serve.api.schemas import JobLogs, MetricRows
from twinkle_core.serve.deps import Caller, OwnedJob, Svc, client_address, job_view, job_views
from twinkle_core.serve.queue import JobRow, JobState
from twinkle_core.serve.run_files import read_log
from twinkle_core.serve.services.jobs import accept, run_metric_rows
from twinkle_core.serve.streams import job_events
from twinkle_core.serve.submission import JobRequest

router = resource_router()


@router.post("/jobs", status_code=201, summary="Submit a job", response_model=JobRow,
             responses={429: error_response("your queue is full (the server's max_queued_per_user)")})
def submit(request: JobRequest, http: Request, user: Caller, svc: Svc) -> JobRow:
    """Queue a training job. Checked now, as ``Trainer`` would: the algorithm, task and hyperparameters
    (400 naming the bad one), the data URI against the server's data roots (403), the user's queue (429)."""
    job = accept(svc, user, request, client_address(http))
    return job_view(svc, job)


@router.get("/jobs", summary="List jobs", response_model=list[JobRow])
async def list_jobs(user: Caller, svc: Svc, state: JobState | None = None, algorithm: str | None = None,
                    owner: Annotated[str | None, Query(alias="user", max_length=64)] = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                    offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> list[JobRow]:
    """The caller's jobs, newest first (an admin's: everyone's, or ``user``'s)."""
    who = (owner if user.admin else user.name)
    if owner is not None and not user.admin and owner != user.name:
        return []
    return job_views(svc, svc.queue.list(who, state, algorithm, limit, offset))


@router.get("/jobs/{job_id}", summary="One job", response_model=JobRow)
async def get_job(job: OwnedJob, svc: Svc) -> JobRow:
    """The job, its transitions (time and reason of each state) and, while it waits, why."""
    return job_view(svc, job)


@router.post("/jobs/{job_id}/cancel", status_code=202, summary="Cancel a job", response_model=JobRow)
def cancel(job: OwnedJob, http: Request, user: Caller, svc: Svc) -> JobRow:
    """A queued job is cancelled now; a running one gets SIGTERM, saves a checkpoint, and SIGKILL after the
    grace period."""
    cancelled = svc.queue.request_cancel(job.id, user.name)
    svc.accounts.audit(user.name, "cancel", job.id, client_address(http), state=cancelled.state)
    return job_view(svc, cancelled)


@router.get("/jobs/{job_id}/logs", summary="A job's output", response_model=JobLogs)
def logs(job: OwnedJob, svc: Svc, offset: Annotated[int, Query(ge=0, le=2**40)] = 0) -> dict[str, Any]:
    """Up to 64 KiB of the job's output from byte ``offset``; ``next_offset`` continues it."""
    text, after = read_log(svc.config.home, job.id, offset)
    return {"text": text, "offset": offset, "next_offset": after}


@router.get("/jobs/{job_id}/metrics", summary="A job's metric rows", response_model=MetricRows)
def metrics(job: OwnedJob, svc: Svc) -> dict[str, Any]:
    """Every metric row its run logged (``step``, ``epoch``, losses, validation metrics)."""
    return {"run": job.run, "rows": run_metric_rows(svc, job.run)}


@router.get("/jobs/{job_id}/events", response_class=EventSourceResponse, summary="Live events (SSE)")
async def events(job: OwnedJob, request: Request, svc: Svc,
                 last_event_id: Annotated[str | None, Query(max_length=80)] = None):  # noqa: ANN201 — a stream
    """Server-sent events: ``state`` (each transition), ``log`` (output lines), ``metric`` (each new row),
    ``reset`` (a restarted run dropped rows after its checkpoint) and ``end``. Each event's id is a cursor:
    reconnect with ``Last-Event-ID`` (or ``?last_event_id=``) to continue after it."""
    job_id = job.id
    cursor = request.headers.get("last-event-id") or last_event_id
    async for event in job_events(svc, job_id, cursor, request):
        yield ServerSentEvent(**event)
