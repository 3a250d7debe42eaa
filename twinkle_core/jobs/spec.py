"""``Job``: a training job as declarative data — what ``Trainer`` takes, never code.

A job is what a supervisor restarts, what ``twinkle launch`` hands every node and what the service queues: a
registered algorithm name, a task, hyperparameters, a data URI and where the run goes. Validated with pydantic
(unknown fields are refused); stored as ``job.json`` in the job's folder (``job_dir``), next to
``run.json`` (the run the job's first attempt created) and ``result.json`` (its ``FitResult``).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.spec import TrainingSpec
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.uris import join, local_cache_dir, twinkle_home

JOB_DIR_ENV = "TWINKLE_JOB_DIR"
"""The environment variable naming the job folder of the current process (set by supervisors and launchers)."""


class Job(BaseModel):
    """One training job: a declarative ``TrainingSpec`` (its fields, flat, as ``TrainingSpec.to_dict`` writes
    them), the data to train on and how many times a crashed worker restarts (``Job.from_spec``, ``Job.spec``)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: str = Field(description="a registered algorithm name (twinkle algorithms list)")
    data: str = Field(description="the data URI")
    task: str | None = None
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    data_processor: str | None = None
    resource_strategy: str | None = None
    user: str | None = None
    project: str | None = None
    home: str | None = None
    max_restarts: int = Field(default=DEFAULT_MAX_RESTARTS, ge=0,
                              description="restarts from the last checkpoint after a crash")
    monitor: dict[str, Any] | None = Field(default=None, description="Trainer.monitor(**monitor)")
    budget: dict[str, Any] | None = Field(default=None, description="Trainer.set_budget_alert(**budget)")

    @classmethod
    def from_spec(cls, spec: TrainingSpec, data: str, max_restarts: int = DEFAULT_MAX_RESTARTS) -> Job:
        """The job training ``spec`` on ``data``.

        Raises:
            TwinkleError: the spec holds code (``TrainingSpec.held_code``).
        """
        return cls(**spec.to_dict(), data=data, max_restarts=max_restarts)

    @property
    def spec(self) -> TrainingSpec:
        """What the job trains, as one value."""
        values = self.model_dump(exclude={"data", "max_restarts"})
        return TrainingSpec.from_dict(values)

    def save(self, folder: str) -> str:
        """Write ``job.json`` into ``folder`` (atomically); returns its path."""
        path = join(folder, "job.json")
        atomic_write_text(path, self.model_dump_json(indent=2))
        return path

    @classmethod
    def load(cls, folder: str) -> Job:
        """Read ``job.json`` from ``folder``."""
        with open(os.path.join(folder, "job.json"), encoding="utf-8") as handle:
            return cls.model_validate_json(handle.read())


def job_dir(home: str | None = None, job_id: str | None = None) -> str:
    """A new (or the named) job folder inside the run store, ``<home>/jobs/<id>`` (created); for a store that
    is not a local path (``s3://``), under the local cache. Multi-node jobs need it on shared storage."""
    root = home or twinkle_home()
    base = os.path.join(local_cache_dir(), "jobs") if "://" in root else os.path.join(root, "jobs")
    folder = os.path.join(base, job_id or uuid.uuid4().hex[:12])
    os.makedirs(folder, exist_ok=True)
    return folder


def read_json(folder: str, name: str) -> dict[str, Any] | None:
    """``folder/name`` parsed, or ``None`` when it is not there (yet)."""
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            return json.load(handle)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_json(folder: str, name: str, data: dict[str, Any]) -> None:
    """Write ``folder/name`` atomically."""
    atomic_write_text(join(folder, name), json.dumps(data, indent=2))


def current_job_dir() -> str | None:
    """The job folder this process belongs to (``$TWINKLE_JOB_DIR``), if any."""
    return os.environ.get(JOB_DIR_ENV) or None
