"""The detection resource strategy: mixed precision where the device has it, accumulation to a nominal batch of 64.

As ultralytics does: gradients accumulate over ``max(round(64 / micro_batch), 1)`` micro-batches, whatever
the effective batch the user asked for; on GPUs training runs in bf16 (or fp16 with loss scaling).
"""

from __future__ import annotations

import math

from twinkle_core.planning import Decision, Plan
from twinkle_core.planning import DefaultStrategy, PlanContext

NOMINAL_BATCH = 64


class DetectionStrategy(DefaultStrategy):
    """The default rules, then YOLO's: mixed precision on capable GPUs and accumulation to a batch of 64."""

    name = "yolo-detection"

    def plan(self, context: PlanContext) -> Plan:
        """Plan as the default strategy, then apply the detection rules (user overrides still win)."""
        plan = super().plan(context)
        workers = plan.devices * plan.num_nodes
        accumulate = max(round(NOMINAL_BATCH / (plan.micro_batch_size * workers)), 1)
        if "accumulate_grad_batches" not in {k for k, v in context.overrides.items() if v is not None}:
            plan.accumulate_grad_batches = accumulate
            plan.effective_batch_size = plan.micro_batch_size * workers * accumulate
            self._replace(plan, "accumulate_grad_batches", accumulate,
                          f"YOLO: accumulate to a nominal batch of {NOMINAL_BATCH} "
                          f"({plan.micro_batch_size} × {workers} × {accumulate} = {plan.effective_batch_size})")
        steps = math.ceil(context.train_samples / max(plan.micro_batch_size * workers, 1) / plan.accumulate_grad_batches)
        plan.estimates["optimizer_steps_per_epoch"] = steps
        plan.estimates["optimizer_steps"] = steps * context.max_epochs
        if plan.accelerator != "cpu" and context.overrides.get("precision") is None:
            hw = context.hardware
            precision = "bf16-mixed" if hw.bf16 else "16-mixed" if hw.fp16 else plan.precision
            plan.precision = precision
            self._replace(plan, "precision", precision, f"YOLO: mixed precision on {hw.device_name}")
        return plan

    @staticmethod
    def _replace(plan: Plan, name: str, value: object, reason: str) -> None:
        plan.decisions = [Decision(name, value, reason) if d.name == name else d for d in plan.decisions]
