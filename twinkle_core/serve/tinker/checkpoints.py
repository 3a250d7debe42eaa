"""The Tinker API's checkpoints (a connector of ``TinkerService``): ``save_state`` and ``save_weights_for_sampler``
write a training model's state into its run (``tinker/weights/<name>/``, ``tinker/sampler_weights/<name>/``,
``tinker://<model>/<kind>/<name>``), ``load_state`` reads one back, and the SDK's REST client lists and deletes them.

A checkpoint is written under ``<name>.partial`` and renamed into place (a kill leaves the previous one whole), and
deleted by a rename out of the listing first (a reader sees it whole or not at all). A request refused here — a
name the paths cannot carry, a checkpoint that does not exist, sampler weights loaded with an optimizer — keeps its
place in the model's order (``Requests.refusing``): the model's next request is answered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import TrainingBackend
from twinkle_core.serve.tinker.models import PROJECT, TrainingModel
from twinkle_core.serve.tinker.ordering import Future, NotFound, Requests
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import run_uri

KINDS = ("weights", "sampler_weights")
"""The kinds of checkpoint: a training state (adapters and optimizer) and adapters for sampling."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_DELETING = ".deleting-"
"""What a checkpoint folder's name carries while ``TinkerCheckpoints.delete`` removes it."""


def in_passing(name: str) -> bool:
    """Whether checkpoint folder ``name`` is being written (``.partial``) or removed: neither listed nor loaded."""
    return name.endswith(".partial") or _DELETING in name


def check_name(name: str) -> None:
    """A checkpoint name the paths can carry.

    Raises:
        TwinkleError: empty, too long, or with characters other than letters, digits, ``_``, ``.``, ``-``.
    """
    if not _NAME.match(name or ""):
        raise TwinkleError(f"checkpoint name {name!r}: use 1–128 letters, digits, '_', '.' or '-' (no '/')")


class TinkerCheckpoints:
    """Writing, reading, listing and deleting the checkpoints of the Tinker API's training models (see the module
    docstring)."""

    def __init__(self, store: RunStore, backend: TrainingBackend, requests: Requests,
                 models: dict[str, TrainingModel], model: Callable[[str, str], TrainingModel]) -> None:
        """Checkpoints in ``store``'s runs, written and read by ``backend``, their requests queued by ``requests``;
        ``models``: the loaded models by id; ``model(user, model_id)``: a loaded model of ``user`` (``NotFound``
        else)."""
        self.store, self.backend, self.requests, self.models, self.model = store, backend, requests, models, model

    def folder_of(self, model: TrainingModel, kind: str, name: str) -> str:
        """Where ``model``'s checkpoint ``<kind>/<name>`` lives."""
        return self.store.path(model.run_id, "tinker", kind, name)

    def save(self, user: str, model_id: str, seq_id: int, name: str, kind: str, overwrite: bool = True) -> Future:
        """Queue writing the model's state (``weights``: adapters and optimizer) or its adapters for sampling
        (``sampler_weights``) as checkpoint ``name``; the answer is its ``tinker://`` path.

        Raises:
            NotFound: no such model of ``user``. TwinkleError: a name the paths cannot carry (refused in its place
                in the model's order).
        """
        model = self.model(user, model_id)
        with self.requests.refusing(model, seq_id, user):
            check_name(name)
        folder, path = self.folder_of(model, kind, name), f"tinker://{model_id}/{kind}/{name}"

        def work() -> dict[str, Any]:
            if os.path.exists(folder) and not overwrite:
                raise TwinkleError(f"checkpoint '{path}' exists; save under another name or with overwrite")
            return {"path": self.write(model, kind, name),
                    "type": "save_weights" if kind == "weights" else "save_weights_for_sampler"}

        return self.requests.in_order(model, seq_id, user, work)

    def write(self, model: TrainingModel, kind: str, name: str) -> str:
        """Write ``model``'s state (``weights``) or adapters (``sampler_weights``) as checkpoint ``name`` now (on
        the engine thread, the model in the backend), replacing one of that name whole; returns its ``tinker://``
        path."""
        folder, path = self.folder_of(model, kind, name), f"tinker://{model.id}/{kind}/{name}"
        partial = f"{folder}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        self.backend.save(model.id, partial, optimizer=kind == "weights")
        uri = f"{run_uri(model.run_id)}/tinker/{kind}/{name}"
        with open(os.path.join(partial, "checkpoint.json"), "w", encoding="utf-8") as handle:
            json.dump({"tinker_path": path, "twinkle_uri": uri, "model_id": model.id, "base_model": model.base,
                       "lora": vars(model.lora), "kind": kind, "step": model.steps, "time": time.time()}, handle)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)  # a kill before this line leaves the previous checkpoint whole
        return path

    def folder(self, user: str, path: str) -> tuple[str, dict[str, Any]]:
        """The folder and record of ``user``'s checkpoint ``tinker://<model>/<kind>/<name>`` (the model need not
        be loaded: its run is found in the store).

        Raises:
            NotFound: not a checkpoint of ``user``'s.
        """
        parts = path.removeprefix("tinker://").split("/") if path.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in KINDS:
            raise NotFound(f"checkpoint '{path}' not found (a tinker://<model>/weights/<name> path)")
        model_id, kind, name = parts
        if not _NAME.match(name) or in_passing(name):
            raise NotFound(f"checkpoint '{path}' not found")
        models = self.models
        run_id = models[model_id].run_id if model_id in models and models[model_id].user == user \
            else self.run_of(user, model_id)
        folder = self.store.path(run_id, "tinker", kind, name)
        try:
            with open(os.path.join(folder, "checkpoint.json"), encoding="utf-8") as handle:
                return folder, json.load(handle)
        except (OSError, ValueError):
            raise NotFound(f"checkpoint '{path}' not found") from None

    def delete(self, user: str, model_id: str, checkpoint_id: str) -> None:
        """Delete ``user``'s checkpoint ``<kind>/<name>`` of training run ``model_id``: renamed out of the listing at
        once, then removed. Samplers already made from it keep their copy.

        Raises:
            NotFound: not a checkpoint of ``user``'s.
        """
        folder, _ = self.folder(user, f"tinker://{model_id}/{checkpoint_id}")
        doomed = f"{folder}{_DELETING}{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, doomed)
        except FileNotFoundError:
            raise NotFound(f"checkpoint 'tinker://{model_id}/{checkpoint_id}' not found") from None
        shutil.rmtree(doomed, ignore_errors=True)

    def run_of(self, user: str, model_id: str) -> str:
        """The store run of ``user``'s training model ``model_id`` (loaded or not).

        Raises:
            NotFound: none.
        """
        for run in self.store.list(user=user, project=PROJECT):
            if (run.hyperparams or {}).get("tinker_model_id") == model_id:
                return run.id
        raise NotFound(f"model '{model_id}' not found")

    def load(self, user: str, model_id: str, seq_id: int, path: str, optimizer: bool) -> Future:
        """Queue loading checkpoint ``path`` (adapters, and with ``optimizer`` the optimizer state) into a loaded
        model.

        Raises:
            NotFound: no such model, or no such checkpoint of ``user``'s. TwinkleError: sampler weights asked for
                with the optimizer. (A refused load keeps its place in the model's order.)
        """
        model = self.model(user, model_id)
        with self.requests.refusing(model, seq_id, user):
            folder, record = self.folder(user, path)
            if optimizer and record.get("kind") != "weights":
                raise TwinkleError(f"'{path}' holds sampler weights, without optimizer state; load it without the "
                                   "optimizer, or load a save_state checkpoint")

        def work() -> dict[str, Any]:
            self.backend.load(model.id, folder, optimizer)
            model.steps = int(record.get("step", model.steps)) if optimizer else model.steps
            return {"type": "load_weights", "path": path, "model_id": model.id}

        return self.requests.in_order(model, seq_id, user, work)

    def runs(self, user: str) -> list[dict[str, Any]]:
        """``user``'s Tinker training runs (loaded or not), newest first, as the SDK's ``TrainingRun``."""
        found = []
        for run in self.store.list(user=user, project=PROJECT):
            hyper = run.hyperparams or {}
            model_id = hyper.get("tinker_model_id")
            if not model_id:
                continue
            checkpoints = self.list(user, model_id, run.id)
            last = {kind: next((c for c in reversed(checkpoints) if c["checkpoint_type"] == kind), None)
                    for kind in ("training", "sampler")}
            found.append({"training_run_id": model_id, "base_model": hyper.get("base_model"), "model_owner": user,
                          "is_lora": True, "lora_rank": hyper.get("lora_rank"), "corrupted": False,
                          "last_request_time": _iso(run.updated), "last_checkpoint": last["training"],
                          "last_sampler_checkpoint": last["sampler"], "user_metadata": {"twinkle_run": run.id}})
        return sorted(found, key=lambda r: r["last_request_time"], reverse=True)

    def list(self, user: str, model_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The checkpoints of ``user``'s training run ``model_id``, oldest first, as the SDK's ``Checkpoint``."""
        run_id = run_id or self.run_of(user, model_id)
        found = []
        for kind, label in (("weights", "training"), ("sampler_weights", "sampler")):
            root = self.store.path(run_id, "tinker", kind)
            for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
                record_file = os.path.join(root, name, "checkpoint.json")
                if in_passing(name) or not os.path.exists(record_file):
                    continue
                with open(record_file, encoding="utf-8") as handle:
                    record = json.load(handle)
                size = sum(os.path.getsize(os.path.join(root, name, f)) for f in os.listdir(os.path.join(root, name)))
                found.append({"checkpoint_id": f"{kind}/{name}", "checkpoint_type": label,
                              "time": _iso(record.get("time", 0)), "tinker_path": record["tinker_path"],
                              "size_bytes": size, "public": False})
        return sorted(found, key=lambda c: c["time"])


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(float(seconds or 0), tz=timezone.utc).isoformat()


__all__ = ["KINDS", "TinkerCheckpoints", "check_name", "in_passing"]
