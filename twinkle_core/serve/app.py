""":func:`create_app`: the service's FastAPI application — the REST API under ``/api/v1`` (OpenAPI at
``/openapi.json``, docs at ``/docs``) and the dashboard at ``/``.

Who asks: an ``Authorization: Bearer`` token (clients, the CLI) or a dashboard session cookie (HttpOnly,
SameSite=Strict; the API takes the cookie for reading only, so no cross-site form can act through it). With
auth off (loopback only) every request is the local user, an admin. A missing or wrong token is 401; another
user's job, run or model is 404, as if it did not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.accounts import Accounts, User
from twinkle_core.serve.config import DataAccessError, ServerConfig
from twinkle_core.serve.queue import JobQueue, QueueFullError
from twinkle_core.store.runs import RunStore

SESSION_COOKIE = "twinkle_session"
"""The dashboard's session cookie."""


@dataclass
class Service:
    """What every request handler needs, opened once per app and shared by its requests and event streams (each
    thread gets its own SQLite connection from them): the configuration, the queue, the accounts, the run store."""

    config: ServerConfig
    queue: JobQueue
    accounts: Accounts
    store: RunStore

    def accept(self, user: User, request: Any, client: str | None, **audit: Any) -> Any:
        """Check a :class:`~twinkle_core.serve.submission.JobRequest` as ``Trainer`` would (its data and every
        file-naming hyperparameter against the user's roots), queue it and audit it; returns the job.

        Raises:
            DataAccessError: data or a hyperparameter outside what the user may read.
            QueueFullError: the user's queue is full.
            TwinkleError: an unknown algorithm, a bad hyperparameter, rule or budget.
        """
        from twinkle_core.serve.config import check_data_uri, check_hyperparameter_uris
        from twinkle_core.serve.submission import check_request

        data = check_data_uri(request.data, self.config, user.name)
        check_hyperparameter_uris(request.trainer_hyperparams(), self.config, user.name)
        check_request(request, self.config.home)
        job = self.queue.submit(user.name, request.model_copy(update={"data": data}).model_dump(mode="json"),
                                request.priority, self.config.max_queued_per_user)
        self.accounts.audit(user.name, "submit", job.id, client, algorithm=request.algorithm, data=data, **audit)
        return job

    def workers_alive(self) -> int:
        """Workers that beat within the lease time."""
        return len(self.queue.workers(self.config.lease_seconds))


async def service(request: Request) -> Service:
    """The :class:`Service` of the app handling ``request``.

    The dependencies here are ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, and a hop
    there and back costs more than what they do (the endpoints themselves stay in the pool)."""
    return request.app.state.service


def _local_user() -> User:
    from twinkle_core.store.runs import default_user

    return User(default_user(), admin=True)


BEARER = HTTPBearer(auto_error=False, description="a token from 'twinkle users add NAME'")
"""The API's security scheme in the OpenAPI document (the header is read by :func:`optional_user`)."""


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


class _App(FastAPI):
    """FastAPI with its body-size limit's plain-text 413 answered in JSON like every other error (the limit sits
    outside the middleware an app can add, so the rewrite wraps the whole stack)."""

    def build_middleware_stack(self) -> Any:
        """FastAPI's stack inside :class:`~twinkle_core.serve.strict_json.JSONTooLarge`."""
        from twinkle_core.serve.strict_json import JSONTooLarge

        return JSONTooLarge(super().build_middleware_stack(), self.max_body_size or 0)


def create_app(config: ServerConfig) -> FastAPI:
    """The application serving ``config`` (its database and store are created on first use)."""
    from twinkle_core.serve.api import router
    from twinkle_core.serve.dashboard import mount_dashboard
    from twinkle_core.serve.strict_json import validation_error

    app = _App(title="Twinkle", version=_version(), summary="Training as a service: jobs, runs and models",
                  max_body_size=config.max_body_bytes)
    app.state.service = Service(config, JobQueue(config.db_path, config.max_running_per_user),
                                Accounts(config.db_path), RunStore(config.home))
    app.include_router(router, prefix="/api/v1")
    mount_dashboard(app)

    app.add_exception_handler(RequestValidationError, validation_error)

    @app.exception_handler(405)
    def _not_allowed(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": f"{request.method} is not allowed here"}, status_code=405,
                            headers={"Allow": ", ".join(allowed_methods(request))})

    @app.exception_handler(QueueFullError)
    def _full(request: Request, err: QueueFullError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=429)

    @app.exception_handler(DataAccessError)
    def _denied(request: Request, err: DataAccessError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=403)

    @app.exception_handler(TwinkleError)
    def _named(request: Request, err: TwinkleError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=400)

    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("twinkle-core")
    except PackageNotFoundError:
        return "0"


def client_address(request: Request) -> str | None:
    """The caller's address (for the audit log)."""
    return request.client.host if request.client else None


def json_safe(value: Any) -> Any:
    """``value`` with anything JSON cannot hold turned into text (objects, NaN and infinite floats)."""
    import json

    from twinkle_core.serve.queue import finite

    return json.loads(json.dumps(finite(value), default=str, allow_nan=False))


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path (Starlette's own 405 names only those of
    the first route that matched the path): each method whose request would match a route fully."""
    from starlette.routing import Match

    return [method for method in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                   for route in request.app.router.routes)]
