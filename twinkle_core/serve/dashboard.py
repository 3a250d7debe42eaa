"""The dashboard at ``/``: server-rendered pages (Jinja2) made live with htmx and its SSE extension, curves
drawn with uPlot — every asset served from the package (no CDN: it works offline).

Pages: log in (the token becomes a session cookie: HttpOnly, SameSite=Strict), jobs with filters, a job's page
(state, why it waits, transitions, live output and curves, the run's plan, alerts, restarts, data fingerprint,
checkpoints and exports to download, cancel), runs, a run's page, and a submit form built from the chosen
algorithm's declared hyperparameters. Every form carries the session's CSRF token.
"""

from __future__ import annotations

import html
import json
import os
import re
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.deps import Service, Svc, client_address, optional_user, owned_job
from twinkle_core.serve.queue import STATES, JobRow
from twinkle_core.serve.run_files import list_files
from twinkle_core.serve.services.jobs import accept
from twinkle_core.serve.security import (
    LOGIN_CSRF_COOKIE,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    User,
    new_csrf_token,
    same_secret,
)
from twinkle_core.serve.streams import job_events
from twinkle_core.serve.submission import JobRequest
from twinkle_core.uris import run_uri

HERE = os.path.dirname(__file__)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal escape sequences (progress bars' cursor moves) left out of the dashboard's log."""
templates = Jinja2Templates(directory=os.path.join(HERE, "templates"))
templates.env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "—"
templates.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, default=str)
pages = APIRouter(include_in_schema=False)


class LoginRequired(Exception):
    """The page needs a logged-in user."""


async def page_user(user: Annotated[User | None, Depends(optional_user)]) -> User:
    """The logged-in user of a page (redirects to the login page otherwise)."""
    if user is None:
        raise LoginRequired
    return user


Viewer = Annotated[User, Depends(page_user)]
"""The logged-in user of a page (the login page otherwise)."""


def viewed_job(job_id: str, user: Viewer, svc: Svc) -> JobRow:
    """The page's job, when the viewer may see it (404 otherwise, as in the API)."""
    return owned_job(svc, user, job_id)


ViewedJob = Annotated[JobRow, Depends(viewed_job)]
"""The job ``{job_id}`` names, the viewer's (or any, for an admin)."""


def csrf_token(request: Request, user: User) -> str:
    """The token every form of this user's pages carries."""
    return user.csrf or request.app.state.local_csrf


def check_csrf(request: Request, user: User, given: str | None) -> None:
    """403 unless a form's CSRF token is the session's."""
    if not same_secret(csrf_token(request, user), given):
        raise HTTPException(403, "the form's CSRF token is missing or stale; reload the page")


def _render(request: Request, name: str, user: User | None, status: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"user": user, "csrf": csrf_token(request, user) if user else "",
                                                      "auth": request.app.state.service.config.auth, **context},
                                      status_code=status)


# ---------------------------------------------------------------------- login
@pages.get("/login", response_class=HTMLResponse)
def login_page(request: Request, error: str | None = None) -> HTMLResponse:
    """The login form (the token from 'twinkle users add')."""
    return _login_form(request, error)


def _login_form(request: Request, error: str | None, status: int = 200) -> HTMLResponse:
    """The login form with a CSRF token of its own: one value in a cookie only this page sets and in the form (a
    page of another site can read neither, so it cannot log a browser in to an account of its choosing)."""
    token = new_csrf_token()
    response = _render(request, "login.html", None, status=status, error=error, login_csrf=token)
    response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", max_age=3600, path="/login",
                        secure=request.url.scheme == "https")
    return response


@pages.post("/login")
def login(request: Request, svc: Svc, token: Annotated[str, Form(max_length=200)],
          csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
    """Exchange a token for a session cookie; the form's CSRF token must match its cookie (403 otherwise)."""
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not same_secret(expected, csrf):
        return _login_form(request, "this login form has expired or is not this server's; log in again", 403)
    user = svc.accounts.by_token(token.strip()) if svc.config.auth else None
    if user is None:
        return _login_form(request, "unknown token", 401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(SESSION_COOKIE, svc.accounts.open_session(user), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", max_age=SESSION_SECONDS, path="/")
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@pages.post("/logout")
def logout(request: Request, svc: Svc, user: Viewer, csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
    """End the session."""
    check_csrf(request, user, csrf)
    if request.cookies.get(SESSION_COOKIE):
        svc.accounts.close_session(request.cookies[SESSION_COOKIE])
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# ---------------------------------------------------------------------- jobs
@pages.get("/", response_class=HTMLResponse)
def jobs_page(request: Request, svc: Svc, user: Viewer, state: str | None = None, algorithm: str | None = None,
              owner: str | None = None) -> HTMLResponse:
    """Jobs (the user's; an admin's: everyone's), filtered by state, algorithm and owner."""
    state = state if state in STATES else None
    who = (owner or None) if user.admin else user.name
    jobs = svc.queue.list(who, state, algorithm or None, limit=200)
    workers = svc.workers_alive()
    reasons = svc.queue.pending_reasons(jobs, workers)
    rows = [{"job": j, "pending": reasons[j.id]} for j in jobs]
    return _render(request, "jobs.html", user, rows=rows, states=STATES, state=state, algorithm=algorithm or "",
                   owner=owner or "", counts=svc.queue.counts(None if user.admin else user.name), workers=workers)


def _run_details(svc: Service, run_uri: str | None) -> dict[str, Any] | None:
    if not run_uri:
        return None
    store = svc.store
    try:
        record = store.get(run_uri)
    except TwinkleError:
        return None
    plan = record.plan or {}
    folder = store.run_dir(record.id)
    files = list_files(folder) if os.path.isdir(folder) else []
    return {"record": record, "plan": plan, "decisions": plan.get("decisions", []),
            "estimates": plan.get("estimates", {}), "alerts": record.alerts,
            "restarts": [a for a in record.alerts if a.get("kind") == "restart"],
            "checkpoints": [f for f in files if f["path"].startswith("checkpoints/")],
            "exports": [f for f in files if f["path"].startswith("exports/")],
            "evaluations": [{**e, "plots": [f["path"] for f in files
                                            if f["path"].startswith(f"evaluations/{e.get('number')}/")
                                            and f["path"].endswith(".png")]}
                            for e in store.evaluations(record.id)],
            "files": files, "base": f"/api/v1/runs/{record.id}/files/"}


@pages.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job: ViewedJob, request: Request, svc: Svc, user: Viewer) -> HTMLResponse:
    """One job: state, why it waits, transitions, live output and curves, its run's details; cancel."""
    return _render(request, "job.html", user, job=job, pending=svc.queue.pending_reason(job, svc.workers_alive()),
                   run=_run_details(svc, job.run), request_json=json.dumps(job.request, indent=2))


def _page_event(name: str, payload: Any, cursor: str) -> dict[str, Any]:
    """Events for htmx: HTML for the state badge and the log, JSON for the chart's points."""
    if name == "state":
        text = f'<span class="state {html.escape(payload["state"])}">{html.escape(payload["state"])}</span>'
        return {"event": "state", "raw_data": text, "id": cursor}
    if name == "log":  # a progress bar's escape codes and carriage returns, as a terminal would end up showing
        text = ANSI.sub("", payload["text"]).replace("\r\n", "\n").replace("\r", "\n")
        lines = html.escape(re.sub(r"\n{2,}", "\n", text)).replace("\n", "&#10;")
        return {"event": "log", "raw_data": f"<span>{lines}</span>", "id": cursor}
    return {"event": name, "raw_data": json.dumps(payload, default=str), "id": cursor}


@pages.get("/jobs/{job_id}/stream", response_class=EventSourceResponse)
async def job_stream(job: ViewedJob, request: Request, svc: Svc):  # noqa: ANN201 — a stream
    """The job page's live events (htmx SSE); the log starts after what the page already shows."""
    cursor = request.headers.get("last-event-id") or request.query_params.get("from")
    async for event in job_events(svc, job.id, cursor, request, _page_event):
        yield ServerSentEvent(**event)


@pages.post("/jobs/{job_id}/cancel")
def cancel_form(job: ViewedJob, request: Request, svc: Svc, user: Viewer,
                csrf: Annotated[str, Form(max_length=100)] = "") -> Response:
    """Cancel from the job's page (nothing changes without the page's CSRF token)."""
    check_csrf(request, user, csrf)
    cancelled = svc.queue.request_cancel(job.id, user.name)
    svc.accounts.audit(user.name, "cancel", job.id, client_address(request), state=cancelled.state, via="dashboard")
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


# ---------------------------------------------------------------------- submit
@pages.get("/submit", response_class=HTMLResponse)
def submit_page(request: Request, user: Viewer, algorithm: str | None = None) -> HTMLResponse:
    """Pick an algorithm, then fill in its declared hyperparameters."""
    from twinkle_core.lookup import list_components
    from twinkle_core.serve.forms import algorithm_form

    names = sorted(c.name for c in list_components("algorithm") if not c.is_family)
    form, error = None, None
    if algorithm:
        try:
            form = algorithm_form(algorithm)
        except TwinkleError as err:
            error = str(err)
    return _render(request, "submit.html", user, names=names, algorithm=algorithm or "", form=form, error=error,
                   roots=request.app.state.service.config.roots())


@pages.post("/submit")
async def submit_form(request: Request, svc: Svc, user: Viewer) -> Response:
    """Queue the job the form describes (checked as the API checks it)."""
    from twinkle_core.serve.forms import algorithm_form, typed_values

    form = dict(await request.form())
    check_csrf(request, user, str(form.get("csrf", "")))
    name = str(form.get("algorithm", ""))
    try:
        fields = algorithm_form(name)["hyperparameters"]
        job_request = JobRequest(algorithm=name, data=str(form.get("data", "")).strip(),
                                 task=str(form.get("task") or "") or None, project=str(form.get("project") or "default"),
                                 priority=int(str(form.get("priority") or 0)),
                                 hyperparams=typed_values(form, fields))
        job = accept(svc, user, job_request, client_address(request), via="dashboard")
    except (TwinkleError, ValidationError, ValueError) as err:
        from twinkle_core.lookup import list_components

        names = sorted(c.name for c in list_components("algorithm") if not c.is_family)
        form_info = algorithm_form(name) if name in names else None
        return _render(request, "submit.html", user, status=400, names=names, algorithm=name, form=form_info,
                       error=str(err), values=form, roots=svc.config.roots())
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


# ---------------------------------------------------------------------- runs
@pages.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, svc: Svc, user: Viewer, status: str | None = None) -> HTMLResponse:
    """Runs (the user's; an admin's: everyone's)."""
    runs = [r for r in svc.store.list(user=None if user.admin else user.name)
            if not status or r.status == status]
    return _render(request, "runs.html", user, runs=runs[:300], status_filter=status or "")


@pages.get("/runs/{owner}/{project}/{run}", response_class=HTMLResponse)
def run_page(owner: str, project: str, run: str, request: Request, svc: Svc, user: Viewer) -> HTMLResponse:
    """One run: metrics, curves, plan, alerts, files."""
    if not user.admin and owner != user.name:
        raise HTTPException(404, "no such run")
    details = _run_details(svc, run_uri(f"{owner}/{project}/{run}"))
    if details is None:
        raise HTTPException(404, "no such run")
    return _render(request, "run.html", user, run=details)


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every HTTP response that does not set them itself (a plain
    ASGI wrapper, so streamed responses — the live event streams — pass through untouched)."""

    def __init__(self, app: Any) -> None:
        """Wrap ``app``."""
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Add the headers to the response's start message."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *((k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                                        if k.lower().encode() not in present)]
            await send(message)

        await self.app(scope, receive, with_headers)


def mount_dashboard(app: FastAPI) -> None:
    """Add the pages, the static assets and the security headers (``SECURITY_HEADERS``) to ``app``."""
    app.state.local_csrf = new_csrf_token()  # auth off: one token per server process
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(LoginRequired)
    def _login(request: Request, err: LoginRequired) -> Response:
        return RedirectResponse("/login", status_code=303)
