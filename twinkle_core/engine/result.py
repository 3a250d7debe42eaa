"""What a fit returns: ``FitResult``, the same on every rank of a job."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle_core.planning.plan import Plan


@dataclass
class FitResult:
    """What ``Trainer.fit`` returns.

    Attributes:
        run_uri: ``twinkle://user/project/runN``.
        status: ``finished`` (or ``stopped`` when a rule stopped it).
        metrics: the final logged metrics (``val_loss``, ``val_accuracy``, ...).
        best_metric: the monitored metric's best value, and its name in ``monitor``.
        monitor: the metric that picked the best checkpoint.
        best_checkpoint: the best checkpoint's URI.
        last_checkpoint: the last checkpoint's URI.
        plan: the resource plan used.
        data_fingerprint: the data's content fingerprint.
        run_dir: the run's folder (metrics.csv, curves.png, plan.json, checkpoints/).
        parent: the run this one continued from, if any.
        alerts: alerts that fired (rules, budget, out-of-memory retries).
        stop_reason: why training stopped early (an alert rule or the budget), if it did.
    """

    run_uri: str
    status: str
    metrics: dict[str, float]
    best_metric: float | None
    monitor: str
    best_checkpoint: str | None
    last_checkpoint: str | None
    plan: Plan
    data_fingerprint: str
    run_dir: str
    parent: str | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the plan as a dict)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FitResult:
        """Rebuild a result from ``to_dict`` output."""
        return cls(**{**data, "plan": Plan.from_dict(data["plan"])})
