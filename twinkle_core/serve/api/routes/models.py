"""Published models and their files."""

from __future__ import annotations

import os
from typing import Any

from fastapi import HTTPException
from fastapi.responses import FileResponse

from twinkle_core.serve.security import User
from twinkle_core.serve.api.errors import resource_router
from twinkle_core.serve.api.schemas import ModelDetail, ModelSummary
from twinkle_core.serve.deps import Caller, Service, Svc, download, json_safe
from twinkle_core.serve.run_files import list_files, published_models
from twinkle_core.uris import store_owner

router = resource_router()


def _models(svc: Service, user: User) -> list[dict[str, Any]]:
    return [m for m in published_models(svc.config.home) if user.admin or store_owner(m.get("run")) == user.name]


@router.get("/models", summary="Published models", response_model=list[ModelSummary])
def models(user: Caller, svc: Svc) -> list[dict[str, Any]]:
    """The caller's published models (``twinkle://models/NAME``), with their run, metrics and exports."""
    return json_safe(_models(svc, user))


def _owned_model(svc: Service, user: User, name: str) -> dict[str, Any]:
    found = next((m for m in _models(svc, user) if m["name"] == name), None)
    if found is None:
        raise HTTPException(404, f"no model '{name}'")
    return found


@router.get("/models/{name}", summary="One published model", response_model=ModelDetail)
def model(name: str, user: Caller, svc: Svc) -> dict[str, Any]:
    """The model's record and files."""
    found = _owned_model(svc, user, name)
    return json_safe({**found, "files": list_files(os.path.join(svc.config.home, "models", name))})


@router.get("/models/{name}/files/{path:path}", summary="Download a published model's file")
def model_file(name: str, path: str, user: Caller, svc: Svc) -> FileResponse:
    """One file of the model (``model.ckpt``, exports)."""
    _owned_model(svc, user, name)
    return download(os.path.join(svc.config.home, "models", name), path)
