"""``JobRequest``: what a client submits — declarative JSON, validated with pydantic (unknown fields are
refused), the same fields as ``Trainer``. Never code, never a pickle.

``check_request`` then checks it the way ``Trainer`` would before anything is queued — from its ``TrainingSpec``
(``JobRequest.to_spec``), with ``twinkle_core.spec.resolve``, never by building a ``Trainer``: the algorithm is
registered, the task is its, every hyperparameter name and type is right, the monitor rules parse, the budget is
priced — each failure a named error. A request that continues a run (``continues``) names a run of the caller's
(``check_continues``: another user's run is refused, a missing one is not found).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.spec import Job
from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.spec.training import ContinueFrom, TrainingSpec

Scalar = str | int | float | bool | None
Value = Scalar | list[Scalar | dict[str, Scalar]] | dict[str, Scalar]
"""A hyperparameter's value in a job: a scalar, a list (of scalars, or of one-level objects: reinforcement
learning's ``rewards=[{"name": "format", "pattern": "7"}]``) or a one-level object."""
Name = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")]


class Resources(BaseModel):
    """What the job may use (each is a Trainer setting; ``None``: the plan decides)."""

    model_config = ConfigDict(extra="forbid")

    accelerator: Literal["cpu", "cuda", "gpu"] | None = None
    devices: int | None = Field(default=None, ge=1, le=1024)
    num_nodes: int | None = Field(default=None, ge=1, le=1024)
    backend: Literal["local", "ray"] | None = Field(default=None, description="ray: on the server's Ray cluster")
    ray_workers: int | None = Field(default=None, ge=1, le=1024, description="Ray Train workers (backend='ray')")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """``workers`` (``ray_workers``' old name, accepted for this release and left out of the schema) becomes
        ``ray_workers``; both given is an error."""
        if isinstance(data, dict) and data.get("workers") is not None:
            if data.get("ray_workers") is not None:
                raise ValueError("workers is the old name of ray_workers; both are given: pass only ray_workers")
            data = {**{k: v for k, v in data.items() if k != "workers"}, "ray_workers": data["workers"]}
        return data


class MonitorRules(BaseModel):
    """``Trainer.monitor(...)``: metrics to watch and alert rules (no webhook: the server sends no requests)."""

    model_config = ConfigDict(extra="forbid")

    metrics: list[Annotated[str, StringConstraints(max_length=100)]] = Field(default_factory=list, max_length=50)
    alert_rules: dict[str, str | dict[str, str] | list[str | dict[str, str]]] = Field(default_factory=dict)
    action: Literal["log", "stop"] = "log"


class Budget(BaseModel):
    """``Trainer.set_budget_alert(...)``."""

    model_config = ConfigDict(extra="forbid")

    max_gpu_hours: float | None = Field(default=None, gt=0, lt=1e6)
    max_cpu_hours: float | None = Field(default=None, gt=0, lt=1e6)
    max_cost: float | None = Field(default=None, gt=0, lt=1e9)
    cloud_provider: Annotated[str, StringConstraints(max_length=40)] = "local"
    instance_type: Annotated[str, StringConstraints(max_length=80)] | None = None


RUN_URI = r"^twinkle://[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/run[0-9]+$"
"""A run's URI as a request names it (ASCII names: the schema's pattern means the same in every JSON Schema
dialect)."""


class Continues(BaseModel):
    """A run of the caller's that the job starts from (``Trainer.from_checkpoint``): its last checkpoint, or its
    best one for ``finetune``."""

    model_config = ConfigDict(extra="forbid")

    run: Annotated[str, StringConstraints(max_length=300, pattern=RUN_URI)] = Field(
        description="twinkle://user/project/runN: a run of the caller's")
    mode: Literal["continue", "finetune", "resume"] = Field(
        default="continue", description="continue: weights and optimizer state, a new schedule; finetune: weights "
        "only; resume: everything, on the same data")


class JobRequest(BaseModel):
    """A training job as a client submits it."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Name = Field(description="a registered algorithm name (GET /api/v1/algorithms); with continues, the "
                                        "run's")
    data: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="the data URI (a path or URI under one of the server's data roots)")
    task: Name | None = None
    hyperparams: dict[Annotated[str, StringConstraints(max_length=100)], Value] = Field(default_factory=dict,
                                                                                        max_length=200)
    data_processor: Name | None = None
    resource_strategy: Name | None = None
    project: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] = "default"
    priority: int = Field(default=0, ge=-100, le=100, description="higher runs first")
    resources: Resources = Field(default_factory=Resources)
    monitor: MonitorRules | None = None
    budget: Budget | None = None
    max_restarts: int = Field(default=DEFAULT_MAX_RESTARTS, ge=0, le=20, description="restarts after a crash, from the last checkpoint")
    wall_clock_limit: float | None = Field(default=None, gt=0, le=30 * 86400,
                                           description="seconds of running time, then the job is stopped")
    continues: Continues | None = Field(default=None, description="a run of yours to start from; hyperparams then "
                                                                  "override the run's")

    def trainer_hyperparams(self) -> dict[str, Any]:
        """``hyperparams`` with the resources merged in (a resource given twice must agree)."""
        merged = dict(self.hyperparams)
        for key, value in self.resources.model_dump(exclude_none=True).items():
            if key in merged and merged[key] != value:
                raise TwinkleError(f"resources.{key}={value!r} and hyperparams.{key}={merged[key]!r} disagree; "
                                   "give it once")
            merged[key] = value
        return merged

    def to_spec(self, user: str, home: str) -> TrainingSpec:
        """The training this request describes, for ``user``, its run going to ``home``.

        Raises:
            TwinkleError: a resource given twice with two values; a budget that is not priced.
        """
        monitor = budget = None
        if self.monitor is not None:  # imported only when asked for: Lightning's callbacks live beside them
            from twinkle_core.ops.monitor import MonitorConfig

            monitor = MonitorConfig(list(self.monitor.metrics), dict(self.monitor.alert_rules), self.monitor.action)
        if self.budget is not None:
            from twinkle_core.ops.budget import BudgetConfig

            budget = BudgetConfig(**self.budget.model_dump())
        continues = ContinueFrom(self.continues.run, self.continues.mode) if self.continues is not None else None
        return TrainingSpec(self.algorithm, self.task, self.trainer_hyperparams(), self.data_processor,
                            self.resource_strategy, user, self.project, home, monitor, budget, continues=continues)

    def to_job(self, user: str, home: str) -> Job:
        """The ``Job`` a service worker runs for ``user``, its run going to ``home``."""
        return Job.from_spec(self.to_spec(user, home), self.data, self.max_restarts)


def check_continues(request: JobRequest, home: str, user: str) -> None:
    """The run a request continues is ``user``'s, of the request's algorithm, and has a checkpoint to start from.

    Raises:
        DataAccessError: another user's run (``continues.run``).
        RunNotFoundError: no such run of ``user``'s.
        TwinkleError: a run of another algorithm, or one with no checkpoint yet.
    """
    if request.continues is None:
        return
    from twinkle_core.serve.config import DataAccessError
    from twinkle_core.store.runs import RunStore

    run = request.continues.run
    owner = run.removeprefix("twinkle://").split("/")[0]
    if owner != user:
        raise DataAccessError(f"continues.run: '{run}' is not a run of yours ({user}); continue one of your runs "
                              "(GET /api/v1/runs)")
    store = RunStore(home)
    record = store.get(run)
    if record.algorithm != request.algorithm:
        raise TwinkleError(f"continues.run: '{run}' is a run of '{record.algorithm}', not '{request.algorithm}'; "
                           f"submit algorithm='{record.algorithm}'")
    if not store.last_checkpoint(record.id):
        raise TwinkleError(f"continues.run: '{run}' has no checkpoint yet ({record.status}); continue it once it "
                           "has written one")


def check_request(request: JobRequest, home: str, user: str | None = None) -> None:
    """Check the request as ``Trainer`` would, from its ``TrainingSpec`` (``resolve``: nothing is built, trained or
    written), so that every mistake is found before anything is queued — with the message ``Trainer`` gives.

    Raises:
        TwinkleError: an unknown algorithm, task or component, a bad hyperparameter, monitor rule or budget.
    """
    from twinkle_core.spec.resolution import resolve  # the algorithms' classes: torch and Lightning

    check_continues(request, home, user or "")
    spec = request.to_spec(user or "", home)
    resolve(spec)
    if spec.monitor is not None:
        spec.monitor.rules()  # parses every rule
