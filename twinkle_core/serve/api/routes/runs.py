"""Runs: list, read, metric rows, files."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import FileResponse

from twinkle_core.serve.api.errors import resource_router
from twinkle_core.serve.api.schemas import FileEntry, MetricRows, RunDetail, RunSummary
from twinkle_core.serve.deps import Caller, OwnedRun, Svc, download, json_safe
from twinkle_core.serve.run_files import list_files
from twinkle_core.serve.services.jobs import run_metric_rows
from twinkle_core.store.catalogue import RunStatus

router = resource_router()


@router.get("/runs", summary="List runs", response_model=list[RunSummary])
def list_runs(user: Caller, svc: Svc, project: Annotated[str | None, Query(max_length=64)] = None,
              status: RunStatus | None = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> list[dict[str, Any]]:
    """The caller's runs, newest first (an admin's: everyone's)."""
    runs = svc.store.list(user=None if user.admin else user.name, project=project)
    return [json_safe(_run_summary(r)) for r in runs if status is None or r.status == status][:limit]


def _run_summary(record: Any) -> dict[str, Any]:
    keys = ("id", "user", "project", "run", "algorithm", "task", "status", "created", "updated", "finished",
            "metrics", "data_uri", "data_fingerprint", "parent", "mode", "error")
    return {"uri": record.uri, **{k: getattr(record, k) for k in keys}}


@router.get("/runs/{owner}/{project}/{run}", summary="One run", response_model=RunDetail)
def get_run(record: OwnedRun) -> dict[str, Any]:
    """The run's record: hyperparameters, plan (with its decisions and estimates), metrics, measurements,
    alerts (restarts among them), checkpoints and exports."""
    return json_safe(record.to_dict())


@router.get("/runs/{owner}/{project}/{run}/metrics", summary="A run's metric rows", response_model=MetricRows)
def run_metrics(record: OwnedRun, svc: Svc) -> dict[str, Any]:
    """Every metric row the run logged."""
    return {"run": record.uri, "rows": run_metric_rows(svc, record.uri)}


@router.get("/runs/{owner}/{project}/{run}/files", summary="A run's files", response_model=list[FileEntry])
def run_files(record: OwnedRun, svc: Svc) -> list[dict[str, Any]]:
    """Every artefact of the run: plan, data record, logs, curves, checkpoints, exports."""
    return list_files(svc.store.run_dir(record.id))


@router.get("/runs/{owner}/{project}/{run}/files/{path:path}", summary="Download a run's file")
def run_file(record: OwnedRun, path: str, svc: Svc) -> FileResponse:
    """One artefact; a path that leaves the run's folder is 404 and nothing is read."""
    return download(svc.store.run_dir(record.id), path)
