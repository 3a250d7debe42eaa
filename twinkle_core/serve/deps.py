"""What a request of the service is given (FastAPI dependencies): the ``Service`` — configuration, queue,
accounts and run store, opened once per app — who asks (a Bearer token for clients and the CLI or, for reading
only, the dashboard's session cookie) and the job or run a path names when the caller may see it (``OwnedJob``,
``OwnedRun``: 404 otherwise). The API's routes (``twinkle_core.serve.api``, one router per resource) and the
dashboard's pages (``twinkle_core.serve.dashboard``) take them as annotated parameters; what is done on the
caller's behalf is in ``twinkle_core.serve.services``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import FileResponse
from fastapi.security import HTTPBearer

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.accounts import Accounts
from twinkle_core.serve.config import ServerConfig
from twinkle_core.serve.queue import JobQueue, JobRow, finite
from twinkle_core.serve.run_files import UnsafePathError, safe_file
from twinkle_core.serve.security import SESSION_COOKIE, User
from twinkle_core.store.catalogue import RunRecord
from twinkle_core.store.runs import RunStore, default_user

@dataclass
class Service:
    """What every request handler needs, opened once per app and shared by its requests and event streams (each
    thread gets its own SQLite connection from them): the configuration, the queue, the accounts, the run store."""

    config: ServerConfig
    queue: JobQueue
    accounts: Accounts
    store: RunStore

    def workers_alive(self) -> int:
        """Workers that beat within the lease time."""
        return len(self.queue.workers(self.config.lease_seconds))


async def service(request: Request) -> Service:
    """The ``Service`` of the app handling ``request``.

    The dependencies here are ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, and a hop
    there and back costs more than what they do (the endpoints themselves stay in the pool)."""
    return request.app.state.service


def _local_user() -> User:
    return User(default_user(), admin=True)


BEARER = HTTPBearer(auto_error=False, description="a token from 'twinkle users add NAME'")
"""The API's security scheme in the OpenAPI document (the header is read by ``optional_user``)."""


async def optional_user(request: Request, svc: Annotated[Service, Depends(service)],
                        _bearer: Annotated[Any, Depends(BEARER)] = None) -> User | None:
    """The caller, from a Bearer token or (for reading) the session cookie; ``None`` when not logged in. (The
    lookup is one primary-key read of a WAL database, where readers never wait for writers: tens of
    microseconds, so it runs on the event loop.)"""
    if not svc.config.auth:
        return _local_user()
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HTTPException(401, "use 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
        user = svc.accounts.by_token(token.strip())
        if user is None:
            raise HTTPException(401, "unknown token; ask an admin for one ('twinkle users add NAME')",
                                headers={"WWW-Authenticate": "Bearer"})
        return user
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return svc.accounts.by_session(cookie)
    return None


async def current_user(request: Request, user: Annotated[User | None, Depends(optional_user)]) -> User:
    """The caller; 401 without credentials. A cookie alone may only read (``GET``): writing needs the token."""
    if user is None:
        raise HTTPException(401, "log in: send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
    if user.csrf is not None and request.method not in ("GET", "HEAD"):
        raise HTTPException(403, "a browser session may only read the API; the dashboard's forms act for it")
    return user


def client_address(request: Request) -> str | None:
    """The caller's address (for the audit log)."""
    return request.client.host if request.client else None


def json_safe(value: Any) -> Any:
    """``value`` with anything JSON cannot hold turned into text (objects, NaN and infinite floats)."""
    return json.loads(json.dumps(finite(value), default=str, allow_nan=False))


Caller = Annotated[User, Depends(current_user)]
"""The logged-in caller (401 without credentials)."""
Svc = Annotated[Service, Depends(service)]
"""The app's ``Service``."""


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


def visible_job(job_id: str, user: Caller, svc: Svc) -> JobRow:
    """The path's job, when the caller may see it (404 otherwise)."""
    return owned_job(svc, user, job_id)


OwnedJob = Annotated[JobRow, Depends(visible_job)]
"""The job ``{job_id}`` names, the caller's (or any, for an admin)."""


def owned_run(svc: Service, user: User, user_part: str, project: str, run: str) -> RunRecord:
    """The run ``user_part/project/run`` when the caller may see it; 404 otherwise."""
    if not user.admin and user_part != user.name:
        raise HTTPException(404, f"no run '{user_part}/{project}/{run}'")
    try:
        return svc.store.get(f"{user_part}/{project}/{run}")
    except TwinkleError:
        raise HTTPException(404, f"no run '{user_part}/{project}/{run}'") from None


def visible_run(owner: str, project: str, run: str, user: Caller, svc: Svc) -> RunRecord:
    """The path's run, when the caller may see it (404 otherwise)."""
    return owned_run(svc, user, owner, project, run)


OwnedRun = Annotated[RunRecord, Depends(visible_run)]
"""The run ``{owner}/{project}/{run}`` names, the caller's (or any, for an admin)."""


def download(folder: str, path: str) -> FileResponse:
    """The file ``path`` inside ``folder``, as a download; 404 for anything else (a path that leaves it too)."""
    try:
        target = safe_file(folder, path)
    except (UnsafePathError, FileNotFoundError, OSError):
        raise HTTPException(404, f"no file '{path}'") from None
    return FileResponse(target, filename=os.path.basename(target))
