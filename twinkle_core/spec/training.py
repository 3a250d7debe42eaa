"""``TrainingSpec``: the description of one training, in one value (see ``twinkle_core.spec``).

Light to import (no torch, no Lightning): the CLI and the service's API read and write specs in jobs and requests
without them; what they describe is imported where it is resolved (``twinkle_core.spec.resolve``)."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from twinkle_core.errors import TwinkleError

if TYPE_CHECKING:
    from twinkle_core.algorithm import Algorithm
    from twinkle_core.data.processor import DataProcessor
    from twinkle_core.ops.budget import BudgetConfig
    from twinkle_core.ops.monitor import MonitorConfig


MODES = ("resume", "continue", "finetune")
"""How a training continues from a checkpoint (``twinkle_core.engine.continuation``): ``resume`` (everything, the
same data), ``continue`` (weights and optimizer state, a new schedule), ``finetune`` (weights only)."""


@dataclass(frozen=True)
class ContinueFrom:
    """Where a training starts from: a checkpoint, and how it continues (``Trainer.from_checkpoint``'s arguments).

    Attributes:
        checkpoint: ``twinkle://user/project/runN`` (its last checkpoint; the best one for ``finetune``) or a
            checkpoint file at any URI.
        mode: ``resume``, ``continue`` or ``finetune`` (``MODES``).
        same_run: with ``resume``, train on in the run that wrote the checkpoint (a restart after a crash).

    Raises:
        TwinkleError: an unknown mode, or ``same_run`` with another mode than ``resume``.
    """

    checkpoint: str
    mode: str = "continue"
    same_run: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TwinkleError(f"unknown mode '{self.mode}'; choose one of {', '.join(MODES)}")
        if self.same_run and self.mode != "resume":
            raise TwinkleError(f"same_run=True resumes the run exactly; it does not combine with mode='{self.mode}'")


@dataclass(frozen=True)
class TrainingSpec:
    """One training, as ``Trainer(...)`` describes it: two specs are equal when they describe the same training,
    however they were made (``Trainer``, a job file, a service request).

    Attributes:
        algorithm: a registered algorithm name, or an ``Algorithm`` subclass (code: not declarative).
        task: the task (``None``: the algorithm's).
        hyperparams: the hyperparameters given (the algorithm's, its data processor's and the trainer's; the
            algorithm's defaults are added by ``resolve``).
        data_processor: a registered processor name, or a configured ``DataProcessor`` (code).
        resource_strategy: a resource strategy name (``None``: the task's).
        user, project, home: whose run, in which project, in which store (``None``: the defaults).
        monitor: ``Trainer.monitor``'s metrics and alert rules.
        budget: ``Trainer.set_budget_alert``'s limits.
        callbacks: extra Lightning callbacks for every fit (code).
        continues: the checkpoint the training starts from, if any (``Trainer.from_checkpoint``); its
            ``hyperparams`` are then overrides of the checkpoint's.
    """

    algorithm: str | type[Algorithm]
    task: str | None = None
    hyperparams: dict[str, Any] = field(default_factory=dict)
    data_processor: str | DataProcessor | None = None
    resource_strategy: str | None = None
    user: str | None = None
    project: str | None = None
    home: str | None = None
    monitor: MonitorConfig | None = None
    budget: BudgetConfig | None = None
    callbacks: tuple[Any, ...] = ()
    continues: ContinueFrom | None = None

    @classmethod
    def of(cls, algorithm: str | type[Algorithm], task: str | None = None, hyperparams: dict[str, Any] | None = None,
           *, callbacks: list[Any] | tuple[Any, ...] | None = None, data_processor: str | DataProcessor | None = None,
           resource_strategy: str | None = None, user: str | None = None, project: str | None = None,
           home: str | None = None, monitor: MonitorConfig | None = None, budget: BudgetConfig | None = None,
           continues: ContinueFrom | None = None, **options: Any) -> TrainingSpec:
        """The spec of ``Trainer(algorithm, task, hyperparams, ..., **options)``: ``options`` are more
        hyperparameters, merged over ``hyperparams`` (``steps=``, the article's name for the step budget, is
        ``max_steps``)."""
        if "steps" in options:
            options["max_steps"] = options.pop("steps")
        return cls(algorithm, task, {**(hyperparams or {}), **options}, data_processor, resource_strategy, user,
                   project, home, monitor, budget, tuple(callbacks or ()), continues)

    def held_code(self) -> list[str]:
        """What this spec holds that is code, not data (another process cannot rebuild it from a file)."""
        from twinkle_core.hyperparams import holds_code

        configured = self.data_processor is not None and not isinstance(self.data_processor, str)  # an instance
        code = sorted(name for name, value in self.hyperparams.items() if holds_code(value))
        return [name for name, held in (("an Algorithm class", not isinstance(self.algorithm, str)),
                                        ("a configured data processor", configured),
                                        ("callbacks", bool(self.callbacks)),
                                        (f"code in hyperparameters ({', '.join(code)})", bool(code))) if held]

    @property
    def is_declarative(self) -> bool:
        """Whether the spec is data only (names and values): it can be written to a job file and rebuilt."""
        return not self.held_code()

    def replace(self, **changes: Any) -> TrainingSpec:
        """A copy with ``changes`` (``hyperparams`` replaces the whole mapping: merge it yourself)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the serialised form a ``Job`` and a job file hold).

        Raises:
            TwinkleError: the spec holds code (``held_code``).
        """
        held = self.held_code()
        if held:
            raise TwinkleError(f"this training holds {', '.join(held)}, which only this process can run; register "
                               "the algorithm and pass names and hyperparameters")
        return {"algorithm": self.algorithm, "task": self.task, "hyperparams": dict(self.hyperparams),
                "data_processor": self.data_processor, "resource_strategy": self.resource_strategy,
                "user": self.user, "project": self.project, "home": self.home,
                "monitor": asdict(self.monitor) if self.monitor is not None else None,
                "budget": asdict(self.budget) if self.budget is not None else None,
                "continues": asdict(self.continues) if self.continues is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingSpec:
        """The spec ``to_dict`` wrote (unknown keys are an error)."""
        values = dict(data)
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TwinkleError(f"unknown field(s) of a training: {', '.join(unknown)}")
        monitor, budget = values.pop("monitor", None), values.pop("budget", None)
        continues = values.pop("continues", None)
        if monitor is not None:  # imported only when there are rules: Lightning's callbacks live beside them
            from twinkle_core.ops.monitor import MonitorConfig

            monitor = MonitorConfig(**monitor)
        if budget is not None:
            from twinkle_core.ops.budget import BudgetConfig

            budget = BudgetConfig(**budget)
        return cls(**values, monitor=monitor, budget=budget,
                   continues=ContinueFrom(**continues) if continues is not None else None)


__all__ = ["MODES", "ContinueFrom", "TrainingSpec"]
