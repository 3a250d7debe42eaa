"""The REST API (mounted at ``/api/v1``): jobs, their logs, metrics and live events, runs and their files,
published models, algorithms, the audit log."""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field

from twinkle_core.serve.accounts import User
from twinkle_core.serve.deps import Service, client_address, current_user, json_safe, service
from twinkle_core.serve.queue import JobRow, JobState
from twinkle_core.serve.records import (UnsafePathError, list_files, metric_rows, owner_of_run, published_models,
                                        read_log, safe_file)
from twinkle_core.serve.streams import job_events
from twinkle_core.serve.strict_json import StrictJSONRoute
from twinkle_core.serve.submission import JobRequest
from twinkle_core.serve.uploads import UPLOAD_NAME


class ErrorBody(BaseModel):
    """Every error the API answers (4xx; 422 lists each invalid field)."""

    detail: str = Field(description="what was wrong, naming the field or value, and the fix")


def _error(meaning: str) -> dict[str, Any]:
    # JSON whatever the operation's own answers are (the event stream's are text/event-stream)
    return {"description": meaning, "content": {"application/json": {"schema": ErrorBody.model_json_schema()}}}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("a bad request: an unknown algorithm or hyperparameter, a bad value, a body that is not JSON"),
    401: _error("no valid token ('Authorization: Bearer <token>')"),
    403: _error("not allowed: data outside your roots, a write through a browser session, an admin's page"),
    404: _error("no such job, run, model, upload or algorithm — or not yours"),
    413: _error("the body is larger than the server's max_body_bytes (uploads: max_upload_bytes)"),
}
"""The error answers every operation may give, each with ``ErrorBody`` (422 is FastAPI's own model)."""

router = APIRouter(route_class=StrictJSONRoute, responses=ERRORS)
Caller = Annotated[User, Depends(current_user)]
UploadName = Annotated[str, PathParam(pattern=UPLOAD_NAME.pattern,
                                      description="letters, digits, '.', '_' and '-' (an archive: .zip, .tar, .tgz)")]
Svc = Annotated[Service, Depends(service)]


def job_views(svc: Service, jobs: list[JobRow]) -> list[JobRow]:
    """Each job with why it waits (when queued)."""
    return svc.queue.explain(jobs, svc.workers_alive())


def job_view(svc: Service, job: JobRow) -> JobRow:
    """``job`` with why it waits (when queued)."""
    return job_views(svc, [job])[0]


def owned_job(svc: Service, user: User, job_id: str) -> JobRow:
    """The job ``job_id`` when ``user`` may see it; 404 otherwise (another user's job does not exist for them)."""
    job = svc.queue.get(job_id) if len(job_id) <= 64 else None
    if job is None or (job.user != user.name and not user.admin):
        raise HTTPException(404, f"no job '{job_id}'")
    return job


# ---------------------------------------------------------------------- server
# The reads that clients poll (/health, /server, /me, /jobs, /jobs/{id}) are ``async``: they run on the event
# loop, as indexed reads of the WAL job table (which never waits for a writer) taking well under a millisecond,
# where a plain ``def`` would hop to FastAPI's thread pool and back — which cost more than the read
# (bench/service.py). Whatever may block — a write, the catalogue, files, a submit's checks — stays a ``def``.
@router.get("/health", summary="Liveness (no auth)")
async def health() -> dict[str, str]:
    """``{"status": "ok"}`` while the server answers."""
    return {"status": "ok"}


@router.get("/server", summary="The server's limits, workers and queue")
async def server_info(user: Caller, svc: Svc) -> dict[str, Any]:
    """Limits, data roots, live workers and jobs per state."""
    return {**svc.config.public(), "workers": svc.workers_alive(), "jobs": svc.queue.counts()}


@router.get("/me", summary="Who the token belongs to")
async def me(user: Caller) -> dict[str, Any]:
    """The caller's name and whether they are an admin."""
    return {"name": user.name, "admin": user.admin}


# ---------------------------------------------------------------------- algorithms
@router.get("/algorithms", summary="Registered algorithms")
def algorithms(user: Caller) -> list[dict[str, Any]]:
    """Every registered algorithm with its tasks and plugin (no module is imported)."""
    from twinkle_core.lookup import list_components

    return [{"name": c.name, "tasks": list(c.tasks), "plugin": c.plugin, "description": c.description}
            for c in list_components("algorithm")]


@router.get("/algorithms/{name:path}", summary="An algorithm's declared hyperparameters")
def algorithm(name: str, user: Caller) -> dict[str, Any]:
    """The algorithm's tasks and every hyperparameter it, its data processors and the trainer take (``name``
    may hold ``/``: ``timm/*``). An algorithm no plugin registered: 404."""
    from twinkle_core.errors import UnknownComponentError
    from twinkle_core.serve.forms import algorithm_form

    try:
        return algorithm_form(name)
    except UnknownComponentError as err:
        raise HTTPException(404, str(err)) from None


# ---------------------------------------------------------------------- jobs
@router.post("/jobs", status_code=201, summary="Submit a job", response_model=JobRow,
             responses={429: _error("your queue is full (the server's max_queued_per_user)")})
def submit(request: JobRequest, http: Request, user: Caller, svc: Svc) -> JobRow:
    """Queue a training job. Checked now, as ``Trainer`` would: the algorithm, task and hyperparameters
    (400 naming the bad one), the data URI against the server's data roots (403), the user's queue (429)."""
    job = svc.accept(user, request, client_address(http))
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
async def get_job(job_id: str, user: Caller, svc: Svc) -> JobRow:
    """The job, its transitions (time and reason of each state) and, while it waits, why."""
    return job_view(svc, owned_job(svc, user, job_id))


@router.post("/jobs/{job_id}/cancel", status_code=202, summary="Cancel a job", response_model=JobRow)
def cancel(job_id: str, http: Request, user: Caller, svc: Svc) -> JobRow:
    """A queued job is cancelled now; a running one gets SIGTERM, saves a checkpoint, and SIGKILL after the
    grace period."""
    owned_job(svc, user, job_id)
    job = svc.queue.request_cancel(job_id, user.name)
    svc.accounts.audit(user.name, "cancel", job_id, client_address(http), state=job.state)
    return job_view(svc, job)


@router.get("/jobs/{job_id}/logs", summary="A job's output")
def logs(job_id: str, user: Caller, svc: Svc, offset: Annotated[int, Query(ge=0, le=2**40)] = 0) -> dict[str, Any]:
    """Up to 64 KiB of the job's output from byte ``offset``; ``next_offset`` continues it."""
    owned_job(svc, user, job_id)
    text, after = read_log(svc.config.home, job_id, offset)
    return {"text": text, "offset": offset, "next_offset": after}


@router.get("/jobs/{job_id}/metrics", summary="A job's metric rows")
def metrics(job_id: str, user: Caller, svc: Svc) -> dict[str, Any]:
    """Every metric row its run logged (``step``, ``epoch``, losses, validation metrics)."""
    job = owned_job(svc, user, job_id)
    return {"run": job.run, "rows": _rows(svc, job.run)}


def _visible_job(job_id: str, user: Caller, svc: Svc) -> JobRow:
    return owned_job(svc, user, job_id)


@router.get("/jobs/{job_id}/events", response_class=EventSourceResponse, summary="Live events (SSE)")
async def events(job: Annotated[JobRow, Depends(_visible_job)], request: Request, svc: Svc,
                 last_event_id: Annotated[str | None, Query(max_length=80)] = None):  # noqa: ANN201 — a stream
    """Server-sent events: ``state`` (each transition), ``log`` (output lines), ``metric`` (each new row),
    ``reset`` (a restarted run dropped rows after its checkpoint) and ``end``. Each event's id is a cursor:
    reconnect with ``Last-Event-ID`` (or ``?last_event_id=``) to continue after it."""
    job_id = job.id
    cursor = request.headers.get("last-event-id") or last_event_id
    async for event in job_events(svc, job_id, cursor, request):
        yield ServerSentEvent(**event)


# ---------------------------------------------------------------------- runs
def _rows(svc: Service, run: str | None) -> list[dict[str, Any]]:
    if not run:
        return []
    store = svc.store
    return metric_rows(store.path(store.run_id(run), "logs"))


def owned_run(svc: Service, user: User, user_part: str, project: str, run: str) -> Any:
    """The run ``user_part/project/run`` when the caller may see it; 404 otherwise."""
    from twinkle_core.errors import TwinkleError

    if not user.admin and user_part != user.name:
        raise HTTPException(404, f"no run '{user_part}/{project}/{run}'")
    try:
        return svc.store.get(f"{user_part}/{project}/{run}")
    except TwinkleError:
        raise HTTPException(404, f"no run '{user_part}/{project}/{run}'") from None


@router.get("/runs", summary="List runs")
def list_runs(user: Caller, svc: Svc, project: Annotated[str | None, Query(max_length=64)] = None,
              status: Annotated[str | None, Query(max_length=20)] = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> list[dict[str, Any]]:
    """The caller's runs, newest first (an admin's: everyone's)."""
    runs = svc.store.list(user=None if user.admin else user.name, project=project)
    return [json_safe(_run_summary(r)) for r in runs if status is None or r.status == status][:limit]


def _run_summary(record: Any) -> dict[str, Any]:
    keys = ("id", "user", "project", "run", "algorithm", "task", "status", "created", "updated", "finished",
            "metrics", "data_uri", "data_fingerprint", "parent", "mode", "error")
    return {"uri": record.uri, **{k: getattr(record, k) for k in keys}}


@router.get("/runs/{owner}/{project}/{run}", summary="One run")
def get_run(owner: str, project: str, run: str, user: Caller, svc: Svc) -> dict[str, Any]:
    """The run's record: hyperparameters, plan (with its decisions and estimates), metrics, measurements,
    alerts (restarts among them), checkpoints and exports."""
    return json_safe(owned_run(svc, user, owner, project, run).to_dict())


@router.get("/runs/{owner}/{project}/{run}/metrics", summary="A run's metric rows")
def run_metrics(owner: str, project: str, run: str, user: Caller, svc: Svc) -> dict[str, Any]:
    """Every metric row the run logged."""
    record = owned_run(svc, user, owner, project, run)
    return {"run": record.uri, "rows": _rows(svc, record.uri)}


@router.get("/runs/{owner}/{project}/{run}/files", summary="A run's files")
def run_files(owner: str, project: str, run: str, user: Caller, svc: Svc) -> list[dict[str, Any]]:
    """Every artefact of the run: plan, data record, logs, curves, checkpoints, exports."""
    record = owned_run(svc, user, owner, project, run)
    return list_files(svc.store.run_dir(record.id))


@router.get("/runs/{owner}/{project}/{run}/files/{path:path}", summary="Download a run's file")
def run_file(owner: str, project: str, run: str, path: str, user: Caller, svc: Svc) -> FileResponse:
    """One artefact; a path that leaves the run's folder is 404 and nothing is read."""
    record = owned_run(svc, user, owner, project, run)
    return _download(svc.store.run_dir(record.id), path)


def _download(folder: str, path: str) -> FileResponse:
    try:
        target = safe_file(folder, path)
    except (UnsafePathError, FileNotFoundError, OSError):
        raise HTTPException(404, f"no file '{path}'") from None
    return FileResponse(target, filename=os.path.basename(target))


# ---------------------------------------------------------------------- models
def _models(svc: Service, user: User) -> list[dict[str, Any]]:
    return [m for m in published_models(svc.config.home) if user.admin or owner_of_run(m.get("run")) == user.name]


@router.get("/models", summary="Published models")
def models(user: Caller, svc: Svc) -> list[dict[str, Any]]:
    """The caller's published models (``twinkle://models/NAME``), with their run, metrics and exports."""
    return json_safe(_models(svc, user))


def _owned_model(svc: Service, user: User, name: str) -> dict[str, Any]:
    found = next((m for m in _models(svc, user) if m["name"] == name), None)
    if found is None:
        raise HTTPException(404, f"no model '{name}'")
    return found


@router.get("/models/{name}", summary="One published model")
def model(name: str, user: Caller, svc: Svc) -> dict[str, Any]:
    """The model's record and files."""
    found = _owned_model(svc, user, name)
    return json_safe({**found, "files": list_files(os.path.join(svc.config.home, "models", name))})


@router.get("/models/{name}/files/{path:path}", summary="Download a published model's file")
def model_file(name: str, path: str, user: Caller, svc: Svc) -> FileResponse:
    """One file of the model (``model.ckpt``, exports)."""
    _owned_model(svc, user, name)
    return _download(os.path.join(svc.config.home, "models", name), path)


# ---------------------------------------------------------------------- uploads
@router.put("/uploads/{name}", status_code=201, summary="Upload data (a file or an archive)",
            max_body_size=1 << 40,  # the upload's own cap (max_upload_bytes) applies while it streams in
            openapi_extra={"requestBody": {"required": True, "description": "the file's bytes, sent as they are",
                                           "content": {"application/octet-stream": {
                                               "schema": {"type": "string", "format": "binary", "minLength": 1}}}}})
async def upload(name: UploadName, http: Request, user: Caller, svc: Svc) -> dict[str, Any]:
    """Send the raw file as the body. ``.zip``, ``.tar``, ``.tar.gz`` and ``.tgz`` are unpacked into a folder
    of the archive's stem. Returns ``data``: the server-side path to submit jobs on (yours alone). Larger than
    the server's ``max_upload_bytes``: 413."""
    from starlette.concurrency import run_in_threadpool

    from twinkle_core.serve.uploads import UploadTooLarge, place, receive, target_name, uploads_dir

    target_name(name)  # a bad name is refused before a byte is read
    folder = uploads_dir(svc.config.home, user.name)
    limit = svc.config.max_upload_bytes
    if int(http.headers.get("content-length") or 0) > limit:
        raise HTTPException(413, f"the upload is larger than this server's limit of {limit} bytes")
    try:
        received, size = await receive(http.stream(), folder, limit)
        if size == 0:
            os.remove(received)
            raise HTTPException(400, "the upload is empty: send the file's bytes as the body")
        path = await run_in_threadpool(place, received, name, folder, limit)
    except UploadTooLarge as err:
        raise HTTPException(413, str(err)) from None
    svc.accounts.audit(user.name, "upload", None, client_address(http), name=name, bytes=size)
    return {"name": os.path.basename(path), "data": path, "bytes": size}


@router.get("/uploads", summary="Your uploads")
def uploads(user: Caller, svc: Svc) -> list[dict[str, Any]]:
    """Each upload's name, server-side path (``data`` for a job), kind and size."""
    from twinkle_core.serve.uploads import list_uploads

    return list_uploads(svc.config.home, user.name)


@router.delete("/uploads/{name}", status_code=204, summary="Delete an upload")
def delete_upload(name: UploadName, http: Request, user: Caller, svc: Svc) -> None:
    """Remove one of your uploads (jobs that already ran on it keep their runs)."""
    import shutil

    from twinkle_core.serve.uploads import UPLOAD_NAME, uploads_dir

    folder = uploads_dir(svc.config.home, user.name)
    path = os.path.join(folder, name)
    if not UPLOAD_NAME.match(name) or not os.path.lexists(path):
        raise HTTPException(404, f"no upload '{name}'")
    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    svc.accounts.audit(user.name, "delete upload", None, client_address(http), name=name)


# ---------------------------------------------------------------------- audit
@router.get("/audit", summary="The audit log (admins)")
def audit(user: Caller, svc: Svc, limit: Annotated[int, Query(ge=1, le=10000)] = 200) -> list[dict[str, Any]]:
    """Every submit and cancel, newest first, with who, when and from where."""
    if not user.admin:
        raise HTTPException(403, "the audit log is for admins")
    return json_safe(svc.accounts.audit_log(limit))
