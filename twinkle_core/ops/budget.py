"""Budgets: a forecast from the plan before training, device-hours tracked while training, 80 % and 100 % alerts.

GPU-hours are wall-clock hours × GPUs in use; CPU-hours are wall-clock hours × CPU threads in use. Cost is
those hours × the price of one GPU (or vCPU) hour on the chosen provider and instance, from the shipped price
table (``prices.json``), ``$TWINKLE_PRICES`` (a JSON file of the same shape) or ``prices=``.
At 100 % a checkpoint is saved, training stops, and the run is marked ``stopped`` — resumable with
``Trainer.from_checkpoint(run, mode="resume")``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping

import lightning as L

from twinkle_core.errors import TwinkleError
from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind
from twinkle_core.ops.notify import stop_with_checkpoint

ALERT_FRACTION = 0.8


class BudgetError(TwinkleError, ValueError):
    """A budget that cannot be priced: unknown provider or instance, or no limit given."""


def load_prices(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The shipped price table, updated with ``$TWINKLE_PRICES`` and then ``overrides`` (per provider)."""
    table = json.loads((resources.files("twinkle_core") / "ops" / "prices.json").read_text())
    layers = []
    if os.environ.get("TWINKLE_PRICES"):
        with open(os.environ["TWINKLE_PRICES"], encoding="utf-8") as handle:
            layers.append(json.load(handle))
    layers.append(dict(overrides or {}))
    for layer in layers:
        for provider, entry in layer.items():
            merged = table.setdefault(provider, {"instances": {}})
            merged.update({k: v for k, v in entry.items() if k != "instances"})
            merged.setdefault("instances", {}).update(entry.get("instances", {}))
    return table


@dataclass
class BudgetConfig:
    """Limits set by ``twinkle_core.Trainer.set_budget_alert`` (any of them may be ``None``)."""

    max_gpu_hours: float | None = None
    max_cpu_hours: float | None = None
    max_cost: float | None = None
    cloud_provider: str = "local"
    instance_type: str | None = None
    prices: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check that a limit is given and that the provider and instance are priced."""
        if self.max_gpu_hours is None and self.max_cpu_hours is None and self.max_cost is None:
            raise BudgetError("set_budget_alert needs max_gpu_hours, max_cpu_hours or max_cost")
        for name in ("max_gpu_hours", "max_cpu_hours", "max_cost"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise BudgetError(f"{name}={value!r} is not a limit: pass a finite number > 0 (or leave it out)")
        table = load_prices(self.prices)
        if self.cloud_provider not in table or self.cloud_provider.startswith("_"):
            providers = ", ".join(sorted(k for k in table if not k.startswith("_")))
            raise BudgetError(f"unknown cloud_provider '{self.cloud_provider}'; priced providers: {providers}")
        self._table = table[self.cloud_provider]
        if self.instance_type is not None and self.instance_type not in self._table["instances"]:
            raise BudgetError(
                f"instance_type '{self.instance_type}' has no price for {self.cloud_provider}; priced: "
                f"{', '.join(sorted(self._table['instances']))} (or pass prices=...)"
            )

    def hourly_price(self, accelerator: str) -> tuple[str, float]:
        """The instance and the price of one GPU-hour (``cuda``) or one vCPU-hour (``cpu``)."""
        key = "default_gpu_instance" if accelerator != "cpu" else "default_cpu_instance"
        name = self.instance_type or self._table[key]
        spec = self._table["instances"][name]
        units = spec.get("gpus", 1) if accelerator != "cpu" else spec.get("vcpus", spec.get("gpus", 1))
        return name, float(spec["usd_per_hour"]) / max(int(units), 1)

    def check(self, gpu_hours: float, cpu_hours: float, cost: float) -> tuple[float, str]:
        """The largest used fraction of any limit, and which limit it is."""
        fractions = []
        if self.max_gpu_hours is not None:
            fractions.append((gpu_hours / self.max_gpu_hours if self.max_gpu_hours else float("inf"), "max_gpu_hours"))
        if self.max_cpu_hours is not None:
            fractions.append((cpu_hours / self.max_cpu_hours if self.max_cpu_hours else float("inf"), "max_cpu_hours"))
        if self.max_cost is not None:
            fractions.append((cost / self.max_cost if self.max_cost else float("inf"), "max_cost"))
        return max(fractions)


@dataclass
class Usage:
    """Device-hours and cost of some wall-clock time on a plan's devices."""

    gpu_hours: float
    cpu_hours: float
    cost: float

    @classmethod
    def of(cls, seconds: float, accelerator: str, devices: int, threads: int, price: float) -> Usage:
        """Usage of ``seconds`` of wall time."""
        hours = seconds / 3600
        if accelerator == "cpu":
            return cls(0.0, hours * threads, hours * threads * price)
        return cls(hours * devices, 0.0, hours * devices * price)


def forecast(config: BudgetConfig, plan: Any) -> dict[str, Any]:
    """The plan's estimated usage against the budget (``fraction`` > 1 means it would be exceeded)."""
    instance, price = config.hourly_price(plan.accelerator)
    seconds = float(plan.estimates.get("estimated_seconds") or 0.0)
    usage = Usage.of(seconds, plan.accelerator, plan.devices * plan.num_nodes, plan.torch_threads, price)
    fraction, limit = config.check(usage.gpu_hours, usage.cpu_hours, usage.cost)
    return {"estimated_seconds": seconds, "gpu_hours": usage.gpu_hours, "cpu_hours": usage.cpu_hours,
            "cost": usage.cost, "fraction": fraction, "limit": limit, "instance": instance,
            "price_per_unit_hour": price, "provider": config.cloud_provider}


class BudgetGuard(L.Callback):
    """Tracks usage while training; alerts at 80 %; at 100 % saves a checkpoint and stops.

    Rank 0's clock decides and its decision is broadcast, so every rank stops at the same step.
    """

    def __init__(self, config: BudgetConfig, plan: Any, notify: Callable[[Alert], None],
                 checkpoint_path: str, clock: Callable[[], float] = time.monotonic) -> None:
        """Prepare to track ``plan``'s devices against ``config``."""
        self.config, self.plan, self.notify, self.checkpoint_path, self.clock = config, plan, notify, checkpoint_path, clock
        self.instance, self.price = config.hourly_price(plan.accelerator)
        self.start: float | None = None
        self.warned = False
        self.stopped_by: Alert | None = None
        self.usage = Usage(0.0, 0.0, 0.0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the clock."""
        self.start = self.clock()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Update usage; alert or stop when a limit is reached."""
        if self.start is None or self.stopped_by is not None:
            return
        warn, stop = trainer.strategy.broadcast(self._measure(trainer) if trainer.is_global_zero else None, src=0)
        if warn is not None:
            self.notify(warn)
        if stop is not None:
            stop_with_checkpoint(trainer, self.checkpoint_path)
            stop.details["checkpoint"] = self.checkpoint_path
            self.stopped_by = stop
            self.notify(stop)

    def _measure(self, trainer: L.Trainer) -> tuple[Alert | None, Alert | None]:
        """Rank 0's usage so far: the 80 % alert and the stop to act on, if due (broadcast to every rank)."""
        assert self.start is not None
        plan = self.plan
        self.usage = Usage.of(self.clock() - self.start, plan.accelerator, plan.devices * plan.num_nodes,
                              plan.torch_threads, self.price)
        fraction, limit = self.config.check(self.usage.gpu_hours, self.usage.cpu_hours, self.usage.cost)
        usage = {"limit": limit, "fraction": round(fraction, 4), "gpu_hours": self.usage.gpu_hours,
                 "cpu_hours": self.usage.cpu_hours, "cost": round(self.usage.cost, 6)}
        at = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        warn = stop = None
        if fraction >= ALERT_FRACTION and not self.warned:  # also when one slow step crossed both thresholds
            self.warned = True
            warn = Alert(AlertKind.BUDGET, AlertAction.LOG, f"budget {limit} {fraction:.0%} used",
                         rule=f"{limit} at {ALERT_FRACTION:.0%}", details=dict(usage), **at)
        if fraction >= 1.0:
            stop = Alert(AlertKind.BUDGET, AlertAction.STOP,
                         f"budget {limit} reached ({fraction:.0%}); checkpoint saved, training stopped — resume "
                         "with Trainer.from_checkpoint(run, mode='resume')", rule=f"{limit} reached",
                         details=dict(usage), **at)
        return warn, stop
