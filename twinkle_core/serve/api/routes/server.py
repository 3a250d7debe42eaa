"""The server itself: liveness, limits and workers, who asks, and the algorithms it trains."""

from __future__ import annotations

import os
from typing import Any

from fastapi import HTTPException

from twinkle_core.serve.api.errors import resource_router
from twinkle_core.serve.api.schemas import AlgorithmDetail, AlgorithmSummary, Health, Me, ServerInfo
from twinkle_core.serve.deps import Caller, Svc

router = resource_router()


# The reads that clients poll (/health, /server, /me, /jobs, /jobs/{id}) are ``async``: they run on the event
# loop, as indexed reads of the WAL job table (which never waits for a writer) taking well under a millisecond,
# where a plain ``def`` would hop to FastAPI's thread pool and back — which cost more than the read
# (bench/service.py). Whatever may block — a write, the catalogue, files, a submit's checks — stays a ``def``.
@router.get("/health", summary="Liveness (no auth)", response_model=Health)
async def health() -> dict[str, str]:
    """``{"status": "ok"}`` while the server answers."""
    return {"status": "ok"}


@router.get("/server", summary="The server's limits, workers and queue", response_model=ServerInfo)
async def server_info(user: Caller, svc: Svc) -> dict[str, Any]:
    """Limits, data roots, live workers and jobs per state — the caller's own jobs (an admin's: every user's)."""
    return {**svc.config.public(), "workers": svc.workers_alive(),
            "jobs": svc.queue.counts(None if user.admin else user.name),
            "api_processes": svc.config.api_process_count(), "answered_by": os.getpid()}


@router.get("/me", summary="Who the token belongs to", response_model=Me)
async def me(user: Caller) -> dict[str, Any]:
    """The caller's name and whether they are an admin."""
    return {"name": user.name, "admin": user.admin}


# ---------------------------------------------------------------------- algorithms
@router.get("/algorithms", summary="Registered algorithms", response_model=list[AlgorithmSummary])
def algorithms(user: Caller) -> list[dict[str, Any]]:
    """Every registered algorithm with its tasks and plugin (no module is imported)."""
    from twinkle_core.lookup import list_components

    return [{"name": c.name, "tasks": list(c.tasks), "plugin": c.plugin, "description": c.description}
            for c in list_components("algorithm")]


@router.get("/algorithms/{name:path}", summary="An algorithm's declared hyperparameters",
            response_model=AlgorithmDetail)
def algorithm(name: str, user: Caller) -> dict[str, Any]:
    """The algorithm's tasks and every hyperparameter it, its data processors and the trainer take (``name``
    may hold ``/``: ``timm/*``). An algorithm no plugin registered: 404."""
    from twinkle_core.errors import UnknownComponentError
    from twinkle_core.serve.forms import algorithm_form

    try:
        return algorithm_form(name)
    except UnknownComponentError as err:
        raise HTTPException(404, str(err)) from None
