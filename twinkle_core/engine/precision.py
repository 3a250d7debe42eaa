"""Lightning's mixed precision with gradient clipping under torch's fused optimizers.

Twinkle builds its optimizers with torch's fused kernels (``Algorithm.optimizer_kernel``), and chooses bf16-mixed
wherever it measured it faster (``PrecisionDecider``). Lightning's ``MixedPrecision`` refuses to clip the gradients
of an optimizer that unscales them inside its own step (a fused one) — in every 16-bit precision, though only fp16
scales gradients: a bf16-mixed run of an algorithm that clips (YOLO clips at 10) would stop at its first step.

``ClippingMixedPrecision`` clips as torch's AMP recipe does: under bf16 (no loss scaler) the gradients are already
true and are clipped as they are; under fp16 the scaler unscales them first (``GradScaler.unscale_``), and the fused
step then sees them unscaled and does not unscale again.

**Switching between bf16 and fp32 on a CPU.** How much faster a CPU's bf16 step is than its fp32 step is not a
constant of the machine: on this project's shared 2-core VM the same ResNet-18 step measured 1.27× faster in bf16
one hour and 0.96× the next, in phases of seconds to hours set by load outside the process. A probe before the run
(``twinkle_core.engine.probes``) measures one moment, and its stored result serves later runs. Where the plan says
so (``Plan.precision_switching``, decided by ``PrecisionSwitchingDecider`` only on a CPU with native bf16 whose probe
found bf16-mixed's losses in agreement with fp32's), ``SwitchingMixedPrecision`` can turn autocast off and on between
steps — both keep fp32 weights, fp32 gradients and the fp32 optimizer; only the forward's arithmetic changes — and
``PrecisionSwitch`` keeps measuring: after ``FIRST_TRIAL_AFTER`` steps, and then at intervals that double (up to
``MAX_TRIAL_INTERVAL``) while the current precision stays the faster, it runs ``TRIAL_STEPS`` steps in the other
(after one warm-up step, not counted), compares their median with the median of the steps just before, and keeps
the other when it is at least ``SWITCH_GAIN`` faster (the interval then starts again). The trial steps are real
training steps, so a trial costs only the difference in their speed — and a trial is left out where the steps left
in the run could not pay that back (``PrecisionSwitch.pays_back``: at the speed ratio the newest trial, or else the
plan's probe, measured; a 20-step run whose other precision is 15 % slower runs none). Every switch, and the steps and seconds spent
in each precision, go into the run's record (``PrecisionSwitch.figures``); the state travels in the checkpoint, so
a resumed run goes on in the precision it had.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from contextlib import AbstractContextManager
from typing import Any, Callable

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch.optim import Optimizer

from twinkle_core.planning.deciders import FIRST_TRIAL_AFTER, MAX_TRIAL_INTERVAL, SWITCH_GAIN, TRIAL_STEPS


class ClippingMixedPrecision(MixedPrecision):
    """``MixedPrecision`` that clips the gradients of fused optimizers (see the module docstring)."""

    def clip_gradients(self, optimizer: Optimizer, clip_val: int | float = 0.0,
                       gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM) -> None:
        """Clip to ``clip_val``: unscaled first under fp16 when the optimizer's step would unscale them itself."""
        if clip_val > 0 and getattr(optimizer, "_step_supports_amp_scaling", False):
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)
            return
        super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)


def precision_plugin(precision: str, accelerator: str, strategy: str) -> Any | None:
    """The precision plugin a run passes to Lightning in place of its ``precision`` flag, or ``None`` where
    Lightning's own applies: 16-bit mixed precision under a strategy that uses ``MixedPrecision`` (one device or
    DDP; FSDP2, DeepSpeed and pipeline stages bring their own)."""
    if precision not in ("bf16-mixed", "16-mixed") or strategy not in ("auto", "ddp"):
        return None
    return ClippingMixedPrecision(precision, "cuda" if accelerator in ("cuda", "gpu") else "cpu")  # type: ignore[arg-type]


KEPT_SWITCHES = 50
"""The newest switches the record and the checkpoint keep (with the count of all)."""

BF16, FP32 = "bf16-mixed", "32-true"


class SwitchingMixedPrecision(ClippingMixedPrecision):
    """bf16-mixed whose autocast ``PrecisionSwitch`` turns off (fp32 arithmetic) and on between training steps (see
    the module docstring); the weights, gradients and optimizer are fp32 either way."""

    def __init__(self, device: str, enabled: bool) -> None:
        """bf16 autocast on ``device`` (``"cpu"``), to begin with on where ``enabled``."""
        super().__init__("bf16-mixed", device)  # type: ignore[arg-type]
        self.enabled = enabled

    @property
    def current(self) -> str:
        """The precision steps run in now: ``"bf16-mixed"`` or ``"32-true"``."""
        return BF16 if self.enabled else FP32

    def autocast_context_manager(self) -> AbstractContextManager[Any]:
        """Lightning's bf16 autocast, off while the run computes in fp32."""
        return torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.enabled, cache_enabled=False)


class PrecisionSwitch(L.Callback):
    """Times training steps in the current precision and, now and then, in the other; keeps the faster (see the
    module docstring). Only single-process runs switch (the planner probes only those); the choice at the end of a
    trial is rank 0's, broadcast to every process all the same."""

    def __init__(self, plugin: SwitchingMixedPrecision, first_after: int = FIRST_TRIAL_AFTER,
                 trial_steps: int = TRIAL_STEPS, gain: float = SWITCH_GAIN,
                 max_interval: int = MAX_TRIAL_INTERVAL, clock: Callable[[], float] = time.perf_counter,
                 bf16_ratio: float | None = None) -> None:
        """Switch ``plugin``'s autocast; the first trial after ``first_after`` steps; steps timed by ``clock``;
        ``bf16_ratio``: a bf16-mixed step's time over an fp32 step's as the plan's probe measured it (``None``:
        not measured — every trial runs)."""
        self.plugin, self.first_after, self.trial_steps, self.gain = plugin, first_after, trial_steps, gain
        self.clock = clock
        self.bf16_ratio = bf16_ratio
        self.total_batches = float("inf")  # the run's training batches (on_train_start), counted from ...
        self.batches_done = 0  # ... the batches before this fit (a resumed run's) and this fit's
        self.skipped = 0
        self.max_interval = max_interval
        self.interval = self.until_trial = first_after
        self.recent: deque[float] = deque(maxlen=trial_steps)
        self.trial: list[float] | None = None
        self.seconds = {BF16: 0.0, FP32: 0.0}
        self.steps = {BF16: 0, FP32: 0}
        self.switches: list[dict[str, Any]] = []
        self.trials = self.switch_count = 0
        self.last_ratio: float | None = None
        self._warm_up = True  # the first step in a precision (after a switch) builds its kernels: not compared
        self._start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """How many training batches the run has (unbounded where it stops on time or never) and has done."""
        accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1)))
        self.total_batches = float(trainer.estimated_stepping_batches) * accumulate
        self.batches_done = int(trainer.global_step) * accumulate

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        """A step starts."""
        self._start = self.clock()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Any, batch: Any,
                           idx: int) -> None:
        """A step ended: count it, and begin or end a trial of the other precision."""
        if self._start is None:
            return
        seconds, self._start = self.clock() - self._start, None
        self.batches_done += 1
        current = self.plugin.current
        self.seconds[current] += seconds
        self.steps[current] += 1
        warm_up, self._warm_up = self._warm_up, False
        if self.trial is not None:
            if not warm_up:
                self.trial.append(seconds)
            if len(self.trial) >= self.trial_steps:
                self._end_trial(trainer)
            return
        if not warm_up:
            self.recent.append(seconds)
        self.until_trial -= 1
        if self.until_trial <= 0 and len(self.recent) >= self.trial_steps:
            if not self.pays_back():
                self.skipped += 1
                self.until_trial = self.interval
                return
            self.trial, self._warm_up = [], True
            self.plugin.enabled = not self.plugin.enabled

    def other_ratio(self) -> float | None:
        """The other precision's step time over the current one's, as last measured: by the newest trial, else
        by the plan's probe; ``None`` where neither measured it."""
        if self.last_ratio is not None:
            return self.last_ratio
        if self.bf16_ratio is None or self.bf16_ratio <= 0:
            return None
        return 1 / self.bf16_ratio if self.plugin.enabled else self.bf16_ratio

    def pays_back(self) -> bool:
        """Whether a trial could pay for itself: its ``trial_steps`` + 1 steps in the other precision cost
        ``(ratio − 1)`` of a step each where the other is slower (``other_ratio``), and a switch it finds saves at
        least ``1 − 1/gain`` of a step on each step left after it — a trial runs only where the steps left could
        save what it costs (always where the ratio is unknown or the other is expected faster)."""
        ratio = self.other_ratio()
        if ratio is None or ratio <= 1:
            return True
        cost = (self.trial_steps + 1) * (ratio - 1)
        left = self.total_batches - self.batches_done - (self.trial_steps + 1)
        return left * (1 - 1 / self.gain) >= cost

    def _end_trial(self, trainer: L.Trainer) -> None:
        assert self.trial is not None
        tried, kept = statistics.median(self.trial), statistics.median(self.recent)
        other = self.plugin.current
        keep_other = bool(trainer.strategy.broadcast(tried * self.gain <= kept, src=0))
        self.trials += 1
        self.last_ratio = kept / tried if keep_other else tried / kept  # the other's over the one kept now
        if keep_other:
            self.switch_count += 1
            self.switches = self.switches[-(KEPT_SWITCHES - 1):] + [{"step": trainer.global_step, "to": other,
                                  "ms": round(tried * 1e3, 2), "before_ms": round(kept * 1e3, 2)}]
            self.interval = self.first_after
            self.recent = deque(self.trial, maxlen=self.trial_steps)
        else:
            self.plugin.enabled = not self.plugin.enabled
            self.interval = min(self.interval * 2, self.max_interval)
            self._warm_up = True
        self.trial, self.until_trial = None, self.interval

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run goes on from (plain data): the precision (the one before a trial in progress), the
        interval and what was counted."""
        enabled = self.plugin.enabled if self.trial is None else not self.plugin.enabled
        return {"enabled": enabled, "interval": self.interval, "until_trial": self.until_trial,
                "seconds": dict(self.seconds), "steps": dict(self.steps), "switches": list(self.switches),
                "trials": self.trials, "switch_count": self.switch_count, "last_ratio": self.last_ratio,
                "skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Go on from a checkpoint's state."""
        self.plugin.enabled = bool(state_dict["enabled"])
        self.interval, self.until_trial = int(state_dict["interval"]), int(state_dict["until_trial"])
        self.seconds.update(state_dict.get("seconds", {}))
        self.steps.update(state_dict.get("steps", {}))
        self.switches = list(state_dict.get("switches", []))
        self.trials = int(state_dict.get("trials", 0))
        self.switch_count = int(state_dict.get("switch_count", len(self.switches)))
        self.last_ratio = state_dict.get("last_ratio")
        self.skipped = int(state_dict.get("skipped", 0))
        self.trial, self._warm_up = None, True
        self.recent.clear()

    def figures(self) -> dict[str, Any]:
        """The run's record of it: steps and seconds in each precision, the trials (and those left out as they
        could not pay back: ``pays_back``), the switches (the newest ``KEPT_SWITCHES``, and their count) and the
        precision at the end."""
        return {"precision_steps": dict(self.steps), "precision_seconds": {k: round(v, 3) for k, v in
                                                                           self.seconds.items()},
                "precision_trials": self.trials, "precision_trials_skipped": self.skipped,
                "precision_switch_count": self.switch_count,
                "precision_switches": list(self.switches),
                "precision_at_end": self.plugin.current}


def probed_bf16_ratio(plan: Any) -> float | None:
    """A bf16-mixed step's time over an fp32 step's in ``plan``'s speed probe (``plan.estimates["probe"]``), or
    ``None`` where it measured no bf16-mixed step."""
    from twinkle_core.planning.probes import SpeedProbe

    stored = (getattr(plan, "estimates", None) or {}).get("probe")
    if not stored:
        return None
    probe = SpeedProbe.from_dict(stored)
    run = probe.run(BF16)
    speed = probe.speedup(run) if run is not None else 0.0
    return 1 / speed if speed > 0 else None


__all__ = ["BF16", "FP32", "KEPT_SWITCHES", "ClippingMixedPrecision", "PrecisionSwitch", "SwitchingMixedPrecision",
           "precision_plugin", "probed_bf16_ratio"]
