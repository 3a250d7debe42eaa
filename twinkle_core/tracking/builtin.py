"""Core's trackers: MLflow, TensorBoard and Weights & Biases (``report_to``; ``twinkle_core.tracking``).

Each talks to its own library's client and is configured by that library's standard settings; each library is
imported only when its tracker starts (the extras ``twinkle-core[mlflow]``, ``[tensorboard]``, ``[wandb]``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping

from twinkle_core.tracking import TrackedRun, Tracker, default_folder

MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}
"""Twinkle's end states as MLflow's run statuses."""

MLFLOW_QUICK_FAILURE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
"""MLflow's HTTP settings where the user has not set them: a server that does not answer is known in seconds
(MLflow's own defaults retry for minutes), and the reporter retries later itself."""


class MLflowTracker(Tracker):
    """MLflow (``report_to="mlflow"``): the run in the experiment ``MLFLOW_EXPERIMENT_NAME`` (default: the Twinkle
    project's name, ``user/project``) of the server or store ``MLFLOW_TRACKING_URI`` (default: MLflow's own), named
    ``user/project/runN``; parameters, tags, metrics with their steps, files as artifacts. A parameter that a
    continued run changes (MLflow keeps one value per name) is logged again as ``<runN>/<name>``."""

    name = "mlflow"
    extra = "mlflow"
    library = "mlflow"

    def __init__(self) -> None:
        """Not connected until ``start``."""
        self.client: Any = None
        self.run_id = ""
        self.run_name = ""

    def start(self, run: TrackedRun) -> str:
        """Reopen ``run.resume_id`` or create the run (its experiment too, if new)."""
        for key, value in MLFLOW_QUICK_FAILURE.items():
            os.environ.setdefault(key, value)
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        self.run_name = run.name.rsplit("/", 1)[-1]
        if run.resume_id:
            self.client.update_run(run.resume_id, status="RUNNING")
            self.run_id = run.resume_id
            return self.run_id
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or f"{run.user}/{run.project}"
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment_id, run_name=run.name).info.run_id
        return self.run_id

    def log_params(self, params: Mapping[str, str]) -> None:
        """New names as they are; a name the run holds with another value as ``<runN>/<name>``."""
        from mlflow.entities import Param

        held = self.client.get_run(self.run_id).data.params
        fresh = []
        for key, value in params.items():
            value = value[:6000]
            if key not in held:
                fresh.append(Param(key, value))
            elif held[key] != value and held.get(f"{self.run_name}/{key}") != value:
                fresh.append(Param(f"{self.run_name}/{key}", value))
        for start in range(0, len(fresh), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=fresh[start:start + 100])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set the tags."""
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, v[:5000]) for k, v in tags.items()])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """One row at ``step``."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def log_artifact(self, path: str, folder: str = "") -> None:
        """Upload the file."""
        self.client.log_artifact(self.run_id, path, artifact_path=folder or None)

    def finish(self, status: str) -> None:
        """End the run with MLflow's status for ``status``."""
        self.client.set_terminated(self.run_id, status=MLFLOW_STATUS.get(status, "FINISHED"))


class TensorBoardTracker(Tracker):
    """TensorBoard (``report_to="tensorboard"``): event files in ``$TENSORBOARD_LOGGING_DIR/user/project/runN``, or
    ``tensorboard/`` in the run's folder; metrics as scalars, parameters and tags as text, PNG files as images and
    text files (``plan.json``, evaluation tables) as text. A resumed or continued run writes into the same folder."""

    name = "tensorboard"
    extra = "tensorboard"
    library = "tensorboard"

    def __init__(self) -> None:
        """Not open until ``start``."""
        self.writer: Any = None
        self.folder = ""

    def start(self, run: TrackedRun) -> str:
        """Open a writer on the run's folder (the one ``run.resume_id`` names, if any)."""
        from torch.utils.tensorboard import SummaryWriter

        self.folder = run.resume_id or default_folder(run, "TENSORBOARD_LOGGING_DIR", "tensorboard")
        self.writer = SummaryWriter(log_dir=self.folder)
        return self.folder

    def log_params(self, params: Mapping[str, str]) -> None:
        """The parameters as one JSON text."""
        self.writer.add_text("params", "```\n" + json.dumps(dict(params), indent=1) + "\n```")
        self.writer.flush()

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """The tags as one JSON text."""
        self.writer.add_text("tags", "```\n" + json.dumps(dict(tags), indent=1) + "\n```")
        self.writer.flush()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Each metric a scalar at ``step`` (flushed: TensorBoard shows a live run's rows)."""
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_artifact(self, path: str, folder: str = "") -> None:
        """A PNG as an image, a text file as text (others are left out: TensorBoard keeps no files)."""
        tag = f"{folder}/{os.path.basename(path)}" if folder else os.path.basename(path)
        if path.endswith(".png"):
            import numpy as np
            from PIL import Image

            with Image.open(path) as image:
                pixels = np.asarray(image.convert("RGB"))
            self.writer.add_image(tag, pixels, dataformats="HWC")
        elif path.endswith((".json", ".csv", ".txt", ".md")):
            with open(path, encoding="utf-8") as handle:
                self.writer.add_text(tag, "```\n" + handle.read(200_000) + "\n```")
        self.writer.flush()

    def finish(self, status: str) -> None:
        """Flush and close the event file."""
        self.writer.add_text("status", status)
        self.writer.close()


class WandbTracker(Tracker):
    """Weights & Biases (``report_to="wandb"``): the run in ``WANDB_PROJECT`` (default: the Twinkle project's name,
    ``user-project``), named ``user/project/runN``, its files under ``wandb/`` in the run's folder (``WANDB_DIR``
    overrides); ``WANDB_MODE=offline`` keeps it on the machine (``wandb sync`` sends it later). Parameters go to the
    run's config, tags to its config under ``twinkle`` (W&B's own tags are short labels), metrics with
    ``global_step`` as their step metric (a continued run's steps start again at 0), files saved with the run."""

    name = "wandb"
    extra = "wandb"
    library = "wandb"

    def __init__(self) -> None:
        """Not open until ``start``."""
        self.run: Any = None

    def start(self, run: TrackedRun) -> str:
        """``wandb.init`` a new run, or resume ``run.resume_id`` (``resume="allow"``)."""
        import wandb

        folder = os.environ.get("WANDB_DIR") or os.path.join(run.run_dir)
        os.makedirs(folder, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or f"{run.user}-{run.project}",
                              name=run.name, id=run.resume_id or None, resume="allow", dir=folder,
                              reinit="create_new", settings=wandb.Settings(silent=True, console="off"))
        self.run.define_metric("*", step_metric="global_step")
        return str(self.run.id)

    def log_params(self, params: Mapping[str, str]) -> None:
        """Into the run's config."""
        self.run.config.update(dict(params), allow_val_change=True)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Into the run's config, under ``twinkle``."""
        self.run.config.update({"twinkle": dict(tags)}, allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """One row, with ``global_step``."""
        self.run.log({**metrics, "global_step": step})

    def log_artifact(self, path: str, folder: str = "") -> None:
        """Saved with the run's files, under ``folder``."""
        import shutil

        target = os.path.join(self.run.dir, folder, os.path.basename(path)) if folder else \
            os.path.join(self.run.dir, os.path.basename(path))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(path, target)
        self.run.save(target, base_path=self.run.dir, policy="now")

    def finish(self, status: str) -> None:
        """End the run (exit code 1 when it failed)."""
        self.run.finish(exit_code=0 if status != "failed" else 1)


__all__ = ["MLFLOW_QUICK_FAILURE", "MLFLOW_STATUS", "MLflowTracker", "TensorBoardTracker", "WandbTracker"]
