"""``Job``: a training job as declarative data — what ``Trainer`` takes, never code.

A job is what a supervisor restarts, what ``twinkle launch`` hands every node and what the service queues: a
declarative ``TrainingSpec`` (a registered algorithm name, a task, hyperparameters, where the run goes, monitor
rules, a budget), a data URI and the restarts a crash may take. Validated with pydantic (unknown fields are
refused); stored as ``job.json`` in the job's folder (``job_dir``), next to
``run.json`` (the run the job's first attempt created) and ``result.json`` (its ``FitResult``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema, model_validator

from twinkle_core.errors import TwinkleError
from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.spec import TrainingSpec
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.uris import join, local_cache_dir, twinkle_home

JOB_DIR_ENV = "TWINKLE_JOB_DIR"
"""The environment variable naming the job folder of the current process (set by supervisors and launchers)."""


def _declarative(value: Any) -> TrainingSpec:
    """A job's spec: a ``TrainingSpec`` holding no code, or the mapping ``TrainingSpec.to_dict`` wrote."""
    try:
        spec = value if isinstance(value, TrainingSpec) else TrainingSpec.from_dict(dict(value))
    except TwinkleError as err:
        raise ValueError(str(err)) from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"not a training spec ({err}): give its fields as a mapping") from None
    held = spec.held_code()
    if held:
        raise ValueError(f"a job is data only, and this training holds {', '.join(held)}")
    return spec


DeclarativeSpec = Annotated[  # Any underneath: pydantic builds no schema of the dataclass (its fields name code)
    Any, PlainValidator(_declarative), PlainSerializer(lambda spec: spec.to_dict(), return_type=dict),
    WithJsonSchema({"type": "object", "description": "a TrainingSpec's fields (TrainingSpec.to_dict)"})]
"""A ``TrainingSpec`` as a job holds it: declarative, and written as its fields."""


class Job(BaseModel):
    """One training job: a declarative ``TrainingSpec``, the data to train on and how many times a crashed worker
    restarts — composed, the spec's fields written once (``job.json``: ``{"spec": {...}, "data": ...,
    "max_restarts": ...}``; a flat file with the spec's fields beside ``data``, as written before, reads the same)."""

    model_config = ConfigDict(extra="forbid")

    spec: DeclarativeSpec = Field(description="what to train (TrainingSpec.to_dict)")
    data: str = Field(description="the data URI")
    max_restarts: int = Field(default=DEFAULT_MAX_RESTARTS, ge=0,
                              description="restarts from the last checkpoint after a crash")

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        """The spec's fields given beside ``data`` (a job file written before the spec, ``Job(algorithm=...)``)
        are the spec."""
        if isinstance(data, dict) and "spec" not in data:
            fields = {f.name for f in dataclasses.fields(TrainingSpec)}
            data = {"spec": {k: v for k, v in data.items() if k in fields},
                    **{k: v for k, v in data.items() if k not in fields}}
        return data

    @classmethod
    def from_spec(cls, spec: TrainingSpec, data: str, max_restarts: int = DEFAULT_MAX_RESTARTS) -> Job:
        """The job training ``spec`` on ``data``.

        Raises:
            TwinkleError: the spec holds code (``TrainingSpec.held_code``).
        """
        spec.to_dict()  # names what it holds
        return cls(spec=spec, data=data, max_restarts=max_restarts)

    @property
    def home(self) -> str | None:
        """The run store the job's run goes to (``spec.home``)."""
        return self.spec.home

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
