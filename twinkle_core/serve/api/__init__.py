"""The REST API (mounted at ``/api/v1``), one router per resource (``routes/``): the server and its algorithms,
jobs (their logs, metrics and live events), runs and their files, published models, uploads, the audit log. Who
asks and what a route is given (the service, the caller, an owned job or run) are ``twinkle_core.serve.deps``."""

from __future__ import annotations

from fastapi import APIRouter

from twinkle_core.serve.api.routes import audit, jobs, models, runs, server, uploads

router = APIRouter()
"""Every route of the API, in the order they are matched."""
for _resource in (server, jobs, runs, models, uploads, audit):
    router.include_router(_resource.router)

__all__ = ["router"]
