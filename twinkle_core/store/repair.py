"""``twinkle runs repair``: rebuild a damaged catalogue from the run folders, which hold what a run wrote.

Each ``runs/<user>/<project>/run<N>/`` folder keeps ``plan.json``, ``data.json``, ``logs/metrics.csv`` and the
checkpoints, whose Twinkle record names the algorithm, task, hyperparameters and data. A rebuilt row has
everything those hold; what only the catalogue knew (the final status, alerts, exports) cannot be recovered,
so the status becomes ``recovered`` (or ``failed`` when no checkpoint was written) and the error says so.
The run store must be on this machine's disk (a remote store keeps its catalogue in the local cache).
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from typing import Any

from twinkle_core.store.catalogue import Catalogue

RECOVERED = "rebuilt from the run folder by 'twinkle runs repair'; the final status and alerts were not recoverable"


def rebuild_catalogue(home: str, catalogue_path: str) -> tuple[int, str | None]:
    """Move the catalogue at ``catalogue_path`` aside (if any) and rebuild it from ``home``'s run folders.

    Returns the number of runs restored and where the old file went (``None`` when there was none).
    """
    moved = None
    if os.path.exists(catalogue_path):
        moved = f"{catalogue_path}.damaged-{int(time.time())}"
        os.replace(catalogue_path, moved)
    catalogue = Catalogue(catalogue_path)
    runs_root = os.path.join(home, "runs")
    count = 0
    for user in sorted(_folders(runs_root)):
        for project in sorted(_folders(os.path.join(runs_root, user))):
            for run in sorted(_folders(os.path.join(runs_root, user, project))):
                if run.startswith("run") and run[3:].isdigit():
                    catalogue.restore(_row(os.path.join(runs_root, user, project, run), user, project, run))
                    count += 1
    return count, moved


def _folders(path: str) -> list[str]:
    return [name for name in os.listdir(path) if os.path.isdir(os.path.join(path, name))] if os.path.isdir(path) else []


def _row(folder: str, user: str, project: str, run: str) -> dict[str, Any]:
    plan, data = _json(os.path.join(folder, "plan.json")), _json(os.path.join(folder, "data.json"))
    record = _checkpoint_record(folder)
    created = os.path.getmtime(os.path.join(folder, "plan.json")) if plan else os.path.getmtime(folder)
    checkpoints = os.path.join(folder, "checkpoints")
    best = os.path.join(checkpoints, "best.ckpt")
    has_checkpoint = os.path.exists(best) or os.path.exists(os.path.join(checkpoints, "last.ckpt"))
    hyperparams = {**record.get("hyperparams", {}), **record.get("data_params", {}), **record.get("trainer", {})}
    return {
        "id": f"{user}/{project}/{run}", "user": user, "project": project, "run": run, "seq": int(run[3:]),
        "algorithm": record.get("algorithm") or "unknown", "task": record.get("task") or "unknown",
        "hyperparams": hyperparams, "plan": plan or {}, "data_uri": data.get("uri") if data else record.get("data_uri"),
        "data_fingerprint": data.get("fingerprint") if data else record.get("data_fingerprint"),
        "hardware": (plan or {}).get("estimates", {}).get("hardware"),
        "status": "recovered" if has_checkpoint else "failed", "metrics": _last_metrics(folder),
        "best_checkpoint": best if os.path.exists(best) else None,
        "error": RECOVERED, "created": created, "updated": time.time(),
    }


def _json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _checkpoint_record(folder: str) -> dict[str, Any]:
    """The Twinkle record of the run's last (or best) checkpoint, read safely (``weights_only``)."""
    import torch

    for name in ("last.ckpt", "best.ckpt"):
        path = os.path.join(folder, "checkpoints", name)
        if os.path.isdir(path):  # a sharded checkpoint folder (engine.sharded): the record is in its meta.pt
            path = os.path.join(path, "meta.pt")
        if os.path.exists(path):
            try:
                checkpoint = torch.load(path, map_location="cpu", weights_only=True)
            except Exception:  # a damaged checkpoint: try the other one
                continue
            record = checkpoint.get("twinkle")
            if isinstance(record, dict):
                return record
    return {}


def _last_metrics(folder: str) -> dict[str, float]:
    """The last value of every metric in ``logs/metrics.csv``."""
    path = os.path.join(folder, "logs", "metrics.csv")
    if not os.path.exists(path):
        return {}
    values: dict[str, float] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(io.StringIO(handle.read())):
            for key, value in row.items():
                if key not in ("epoch", "step") and value not in ("", None):
                    try:
                        values[key] = float(value)
                    except ValueError:
                        continue
    return values
