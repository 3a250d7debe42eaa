"""``trainer.monitor(...)``: extra metrics (``grad_norm``, ``lr``) and alert rules evaluated while training."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import lightning as L
from lightning.pytorch.utilities import grad_norm

from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind
from twinkle_core.ops.notify import stop_with_checkpoint
from twinkle_core.ops.rules import Rule, parse_rule

COMPUTED_METRICS = ("grad_norm", "lr")
"""Metrics the monitor computes itself; any other name is one the algorithm logs (``loss``, ``accuracy``)."""


@dataclass
class MonitorConfig:
    """What ``twinkle_core.Trainer.monitor`` asked for (rules are parsed afresh for every fit).

    Attributes:
        metrics: metric names to log and watch (``grad_norm`` and ``lr`` are computed here).
        alert_rules: metric → rule text, or metric → ``{"rule": text, "action": "stop"}``.
        action: the default action of a rule: ``log`` or ``stop`` (checkpoint, then stop training).
        webhook: a URL that receives every alert as a JSON POST.
    """

    metrics: list[str] = field(default_factory=list)
    alert_rules: Mapping[str, Any] = field(default_factory=dict)
    action: str = "log"
    webhook: str | None = None

    def rules(self) -> list[Rule]:
        """Parse every rule (raises ``AlertRuleError`` naming a bad one)."""
        parsed = []
        for metric, spec in self.alert_rules.items():
            specs = spec if isinstance(spec, list) else [spec]
            for item in specs:
                if isinstance(item, Mapping):
                    parsed.append(parse_rule(metric, item["rule"], item.get("action", self.action)))
                else:
                    parsed.append(parse_rule(metric, item, self.action))
        return parsed


def resolve_metric(metrics: Mapping[str, Any], name: str, unit: str) -> tuple[str, float] | None:
    """Find ``name`` among logged metrics: as written, else its validation, epoch or step variant."""
    if unit == "epoch":
        candidates = [name, f"val_{name}", f"{name}_epoch", f"train_{name}_epoch", f"train_{name}"]
    else:
        candidates = [f"{name}_step", name, f"train_{name}_step", f"train_{name}"]
    for key in candidates:
        if key in metrics:
            value = metrics[key]
            return key, float(value.item() if hasattr(value, "item") else value)
    return None


class Monitor(L.Callback):
    """Logs the computed metrics and evaluates alert rules at each step or epoch end.

    Under several processes rank 0 decides (on the reduced epoch metrics, or its own step metrics) and
    broadcasts its alerts, so a ``stop`` rule stops every rank at the same step.
    """

    def __init__(self, config: MonitorConfig, notify: Callable[[Alert], None], checkpoint_path: str) -> None:
        """Parse the rules now, so a bad rule fails before training starts."""
        self.config = config
        self.rules = config.rules()
        self.notify = notify
        self.checkpoint_path = checkpoint_path
        self.stopped_by: Alert | None = None
        self._missing_reported: set[str] = set()

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        """Log the total L2 norm of the gradients as ``grad_norm``."""
        if "grad_norm" in self.config.metrics:
            norms = grad_norm(pl_module, norm_type=2)
            total = norms.get("grad_2.0_norm_total", 0.0)
            pl_module.log("grad_norm", float(total), on_step=True, on_epoch=True, prog_bar=False)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Log ``lr`` and evaluate step rules."""
        if "lr" in self.config.metrics and trainer.optimizers:
            pl_module.log("lr", trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        self._evaluate(trainer, "step")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Evaluate epoch rules (validation metrics of this epoch are available here)."""
        self._evaluate(trainer, "epoch")

    def _evaluate(self, trainer: L.Trainer, unit: str) -> None:
        """Rank 0 evaluates the rules; every rank receives its alerts, so all stop together."""
        if not any(rule.unit == unit for rule in self.rules):
            return
        metrics = trainer.callback_metrics  # on every rank: reading it reduces epoch metrics (a collective)
        alerts = self._alerts(trainer, metrics, unit) if trainer.is_global_zero else []
        for alert in trainer.strategy.broadcast(alerts, src=0):
            if alert.stops_training and self.stopped_by is None:
                stop_with_checkpoint(trainer, self.checkpoint_path)
                self.stopped_by = alert
                alert.details["checkpoint"] = self.checkpoint_path
            self.notify(alert)

    def _alerts(self, trainer: L.Trainer, metrics: Mapping[str, Any], unit: str) -> list[Alert]:
        alerts: list[Alert] = []
        for rule in self.rules:
            if rule.unit != unit:
                continue
            found = resolve_metric(metrics, rule.metric, unit)
            if found is None:
                if unit == "epoch" and rule.metric not in self._missing_reported:
                    self._missing_reported.add(rule.metric)
                    alerts.append(Alert(AlertKind.MISSING_METRIC, AlertAction.LOG,
                                        f"metric '{rule.metric}' is not logged; logged: "
                                        f"{', '.join(sorted(metrics)) or 'none'}", rule=rule.text, metric=rule.metric,
                                        epoch=trainer.current_epoch, step=trainer.global_step))
                continue
            name, value = found
            message = rule.observe(value, name)
            if message is None:
                continue
            alerts.append(Alert(AlertKind(rule.kind), AlertAction(rule.action), message, rule=rule.text, metric=name,
                                value=value if math.isfinite(value) else str(value), epoch=trainer.current_epoch,
                                step=trainer.global_step))
        return alerts
