"""``create_app``: the service's FastAPI application — the REST API under ``/api/v1`` (OpenAPI at
``/openapi.json``, Swagger UI at ``/docs`` from vendored files: ``apidocs``) and the dashboard at ``/``.

Who asks: an ``Authorization: Bearer`` token (clients, the CLI) or a dashboard session cookie (HttpOnly,
SameSite=Strict; the API takes the cookie for reading only, so no cross-site form can act through it). With
auth off (loopback only) every request is the local user, an admin. A missing or wrong token is 401; another
user's job, run or model is 404, as if it did not exist. Who asks, and what each request is given, is
``twinkle_core.serve.deps``; the routes are ``api`` and
``dashboard``. Nothing imports this module but the server that runs it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.accounts import Accounts
from twinkle_core.serve.api import router
from twinkle_core.serve.apidocs import mount_api_docs
from twinkle_core.serve.config import DataAccessError, ServerConfig
from twinkle_core.serve.dashboard import mount_dashboard
from twinkle_core.serve.deps import Service
from twinkle_core.serve.queue import JobQueue, QueueFullError
from twinkle_core.serve.strict_json import JSONTooLarge, too_large, validation_error
from twinkle_core.store.runs import RunNotFoundError, RunStore
from twinkle_core.uris import DataNotFoundError

class _App(FastAPI):
    """FastAPI with its body-size limit's plain-text 413 answered in JSON like every other error (the limit sits
    outside the middleware an app can add, so the rewrite wraps the whole stack)."""

    def build_middleware_stack(self) -> Any:
        """FastAPI's stack inside ``JSONTooLarge``."""
        return JSONTooLarge(super().build_middleware_stack(), self.max_body_size or 0)


def create_app(config: ServerConfig) -> FastAPI:
    """The application serving ``config`` (its database and store are created on first use)."""
    app = _App(title="Twinkle", version=_version(), summary="Training as a service: jobs, runs and models",
                  max_body_size=config.max_body_bytes, docs_url=None, redoc_url=None)
    app.state.service = Service(config, JobQueue(config.db_path, config.max_running_per_user),
                                Accounts(config.db_path), RunStore(config.home))
    app.include_router(router, prefix="/api/v1")
    if config.tinker:
        from twinkle_core.serve.tinker import mount

        mount(app, config, app.state.service.store)
    mount_dashboard(app)
    mount_api_docs(app)

    app.add_exception_handler(RequestValidationError, validation_error)

    @app.exception_handler(413)
    def _too_large(request: Request, err: Exception) -> JSONResponse:
        detail = getattr(err, "detail", None)
        if detail in (None, "Content Too Large"):  # the body limit's own, met while a chunked body streamed in
            detail = too_large(config.max_body_bytes)
        return JSONResponse({"detail": detail}, status_code=413)

    @app.exception_handler(405)
    def _not_allowed(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": f"{request.method} is not allowed here"}, status_code=405,
                            headers={"Allow": ", ".join(allowed_methods(request))})

    @app.exception_handler(QueueFullError)
    def _full(request: Request, err: QueueFullError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=429)

    @app.exception_handler(DataNotFoundError)
    def _no_data(request: Request, err: DataNotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=404)

    @app.exception_handler(RunNotFoundError)
    def _no_run(request: Request, err: RunNotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=404)

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


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path (Starlette's own 405 names only those of
    the first route that matched the path): each method whose request would match a route fully."""
    from starlette.routing import Match

    return [method for method in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                   for route in request.app.router.routes)]
