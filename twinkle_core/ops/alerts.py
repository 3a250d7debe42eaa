"""Alerts: what a rule, a budget, an out-of-memory retry or a restart says about a run, as one typed record.

Whoever raises an alert builds an ``Alert``; ``twinkle_core.ops.notify.run_notifier`` logs it, posts it to the
run's webhook and appends ``Alert.to_dict()`` to the run's ``alerts`` in the catalogue — plain JSON there, so
``twinkle runs show``, the dashboard and a webhook read the same fields they always did (``kind``, ``action``,
``message``, ``rule``, ``metric``, ``value``, ``epoch``, ``step`` and the kind's own details).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any


class AlertKind(StrEnum):
    """What raised an alert: a monitoring rule's kind, a missing metric, the budget, an OOM retry or a restart."""

    NAN = "nan"
    COMPARE = "compare"
    STALE = "stale"
    INCREASE = "increase"
    MISSING_METRIC = "missing_metric"
    BUDGET = "budget"
    OOM = "oom"
    RESTART = "restart"


class AlertAction(StrEnum):
    """What was done about it: logged, training stopped (with a checkpoint), retried smaller, restarted, given up."""

    LOG = "log"
    STOP = "stop"
    RETRY = "retry"
    RESTART = "restart"
    GIVE_UP = "give up"


@dataclass
class Alert:
    """One alert about a run.

    Attributes:
        kind: what raised it.
        action: what was done about it.
        message: the sentence a person reads.
        rule: the rule that fired, as written (``"loss: nan"``, ``"max_cost reached"``), if any.
        metric: the metric the rule looked at, if any.
        value: the metric's value (non-finite values as text, so that the record stays strict JSON), if any.
        epoch: the epoch it fired in, if training.
        step: the optimizer step it fired at, if training.
        details: what this kind adds (a budget's limit and usage, an OOM retry's new batch, a restart's attempt
            and exit code, the checkpoint a stop saved).
    """

    kind: AlertKind
    action: AlertAction
    message: str
    rule: str | None = None
    metric: str | None = None
    value: float | str | None = None
    epoch: int | None = None
    step: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Type ``kind`` and ``action`` given as text."""
        self.kind, self.action = AlertKind(self.kind), AlertAction(self.action)

    @property
    def stops_training(self) -> bool:
        """Whether this alert stops the run (a rule or budget with ``stop``; never a missing metric)."""
        return self.action is AlertAction.STOP and self.kind is not AlertKind.MISSING_METRIC

    def to_dict(self) -> dict[str, Any]:
        """The JSON stored in the run's ``alerts`` and posted to a webhook: set fields and the details, flat."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        flat = {name: str(value) if isinstance(value, StrEnum) else value
                for name, value in named.items() if value is not None}
        return {**flat, **self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alert:
        """The alert ``to_dict`` wrote (keys other than the fields go back into ``details``)."""
        names = {f.name for f in fields(cls)} - {"details"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   details={k: v for k, v in data.items() if k not in names})
