"""Resource strategies: (algorithm, data, hardware, history) → :class:`Plan`.

:class:`DefaultStrategy` is core's built-in; plugins register their own through
``register_resource_strategies`` (usually subclassing the default and adjusting a few choices).
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from twinkle_core.planning.estimate import ModelFacts
from twinkle_core.planning.hardware import Hardware
from twinkle_core.planning.plan import Decision, Plan

SINGLE_DEVICE_PARAMS = 100_000_000
"""Below this many parameters a model trains on one device: communication would cost more than it saves."""

STREAMING_FRACTION = 0.5
"""Data larger than this share of host memory is streamed in shards instead of loaded whole."""

_CPU_FLOPS_PER_CORE = 2e10  # a conservative fp32 throughput guess for time estimates without history


@dataclass
class PlanContext:
    """Everything a strategy may look at.

    Attributes:
        algorithm_name: the algorithm's registered name (or class name).
        task: the task.
        facts: model measurements (:func:`twinkle_core.planning.estimate.measure`).
        data_bytes: the data's size on storage.
        train_samples: samples in the training split.
        batch_size: the requested micro-batch (the ``batch_size`` hyperparameter).
        effective_batch_size: the requested samples per optimizer step (default: ``batch_size``).
        max_epochs: epochs requested.
        hardware: the machine.
        history: earlier finished runs of the same algorithm, data fingerprint and hardware (newest first),
            each a catalogue record with its ``plan`` and ``measured`` figures.
        overrides: choices the user fixed (``precision``, ``devices``, ``accelerator``, ``strategy``,
            ``num_workers``); a strategy keeps them and says so.
        supports_mixed_precision: whether the algorithm trains safely in 16-bit.
    """

    algorithm_name: str
    task: str
    facts: ModelFacts
    data_bytes: int
    train_samples: int
    batch_size: int
    effective_batch_size: int | None
    max_epochs: int
    hardware: Hardware
    history: list[dict[str, Any]] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    supports_mixed_precision: bool = True


class ResourceStrategy(ABC):
    """Base class of resource strategies."""

    name = "strategy"

    @abstractmethod
    def plan(self, context: PlanContext) -> Plan:
        """Choose devices, precision, distribution, batch and data loading for ``context``."""


class DefaultStrategy(ResourceStrategy):
    """Core's rules, each decision explained.

    * accelerator: CUDA when present, else CPU; one device below 100M parameters, every device above;
    * precision: bf16-mixed on GPUs with bf16, 16-mixed on older GPUs, 32-true on CPU;
    * distribution: none on one device; DDP when the model's training state fits one device; FSDP when it
      fits sharded; DeepSpeed ZeRO-3 with CPU offload beyond that;
    * micro-batch: the requested batch halved until activations and state fit 80 % of device memory, with
      gradient accumulation keeping the requested effective batch;
    * data: streamed in shards when larger than half the host memory;
    * loader workers and threads from the cores;
    * history: a finished run of the same algorithm, data and hardware supplies measured step time and the
      micro-batch that fitted.
    """

    name = "default"

    def plan(self, context: PlanContext) -> Plan:
        """Apply the rules above to ``context``."""
        c, hw, facts = context, context.hardware, context.facts
        decisions: list[Decision] = []
        fixed = c.overrides

        def decide(name: str, value: Any, reason: str) -> Any:
            if name in fixed and fixed[name] is not None:
                value, reason = fixed[name], "set by the user"
            decisions.append(Decision(name, value, reason))
            return value

        accelerator = decide(
            "accelerator", hw.accelerator,
            f"{hw.devices}× {hw.device_name} available" if hw.accelerator != "cpu" else "no GPU found",
        )
        if hw.accelerator == "cpu" or facts.parameters < SINGLE_DEVICE_PARAMS:
            devices = decide(
                "devices", 1,
                f"{_human(facts.parameters)} parameters < {_human(SINGLE_DEVICE_PARAMS)}: one device avoids "
                "communication" if hw.accelerator != "cpu" else "CPU training runs as one process",
            )
        else:
            devices = decide("devices", hw.devices, f"{_human(facts.parameters)} parameters: use every device")
        nodes = decide("num_nodes", hw.nodes, "TWINKLE_NUM_NODES" if hw.nodes > 1 else "one machine")
        precision = decide("precision", *self._precision(c))
        device_memory = hw.device_memory_bytes
        strategy = decide("strategy", *self._distribution(facts, int(devices) * int(nodes), device_memory))
        micro, accumulate, effective = self._batching(c, int(devices) * int(nodes), device_memory, decide)
        loading = decide(
            "data_loading",
            "streaming" if c.data_bytes > STREAMING_FRACTION * max(hw.memory_bytes, 1) else "in-memory",
            f"data {_bytes(c.data_bytes)} vs host memory {_bytes(hw.memory_bytes)}",
        )
        workers, threads = self._loading(c, loading, decide)
        steps_per_epoch = math.ceil(c.train_samples / max(micro * int(devices) * int(nodes), 1) / accumulate)
        estimates = {
            "hardware": hw.key,
            **facts.to_dict(),
            "data_bytes": c.data_bytes,
            "train_samples": c.train_samples,
            "optimizer_steps_per_epoch": steps_per_epoch,
            "optimizer_steps": steps_per_epoch * c.max_epochs,
            **self._time(c, threads, int(devices) * int(nodes)),
        }
        history = c.history[0]["id"] if c.history else None
        return Plan(
            accelerator=str(accelerator),
            devices=int(devices),
            num_nodes=int(nodes),
            precision=str(precision),
            strategy=str(strategy),
            micro_batch_size=micro,
            accumulate_grad_batches=accumulate,
            effective_batch_size=effective,
            data_loading=str(loading),
            num_workers=int(workers),
            torch_threads=int(threads),
            strategy_name=self.name,
            estimates=estimates,
            decisions=decisions,
            history_run=history,
        )

    # -------------------------------------------------------------- the rules
    def _precision(self, c: PlanContext) -> tuple[str, str]:
        hw = c.hardware
        if hw.accelerator == "cpu":
            return "32-true", "CPU: 16-bit autocast is slower than fp32 on most CPUs"
        if not c.supports_mixed_precision:
            return "32-true", f"{c.algorithm_name} does not support mixed precision"
        if hw.bf16:
            return "bf16-mixed", f"{hw.device_name} computes bf16 natively (no loss scaling needed)"
        if hw.fp16:
            return "16-mixed", f"{hw.device_name} has fp16 tensor cores but no bf16"
        return "32-true", f"{hw.device_name} has no fast 16-bit arithmetic"

    def _distribution(self, facts: ModelFacts, workers: int, device_memory: int) -> tuple[str, str]:
        if workers <= 1:
            return "auto", "one device: no distributed strategy"
        budget = 0.8 * device_memory
        if facts.state_bytes < 0.5 * budget:
            return "ddp", f"training state {_bytes(facts.state_bytes)} fits one device: replicate (DDP)"
        if facts.state_bytes / workers < 0.5 * budget:
            return "fsdp", f"training state {_bytes(facts.state_bytes)} fits only sharded over {workers} devices"
        return (
            "deepspeed_stage_3_offload",
            f"training state {_bytes(facts.state_bytes)} exceeds {workers} devices' memory: ZeRO-3 with CPU offload",
        )

    def _batching(self, c: PlanContext, workers: int, device_memory: int, decide: Any) -> tuple[int, int, int]:
        effective = c.effective_batch_size or c.batch_size * workers
        budget = 0.8 * device_memory - c.facts.state_bytes
        per_sample = max(c.facts.activation_bytes_per_sample * 2, 1)  # activations and their gradients
        micro = c.batch_size
        reason = f"requested batch_size {c.batch_size} fits device memory"
        measured = _history_micro_batch(c)
        if measured is not None and measured < micro:
            micro, reason = measured, f"largest micro-batch that fitted in run {c.history[0]['id']}"
        while micro > 1 and micro * per_sample > budget:
            micro //= 2
            reason = f"batch_size {c.batch_size} would need {_bytes(c.batch_size * per_sample)} of activations"
        micro = int(decide("micro_batch_size", micro, reason))
        accumulate = max(1, math.ceil(effective / (micro * workers)))
        accumulate = int(
            decide(
                "accumulate_grad_batches", accumulate,
                f"{micro} × {workers} device(s) × {accumulate} = effective batch {micro * workers * accumulate}"
                + (f" (requested {effective})" if micro * workers * accumulate != effective else ""),
            )
        )
        return micro, accumulate, micro * workers * accumulate

    def _loading(self, c: PlanContext, loading: str, decide: Any) -> tuple[int, int]:
        cores = c.hardware.cpu_count
        env_threads = os.environ.get("OMP_NUM_THREADS")
        if c.hardware.accelerator == "cpu":
            threads = int(env_threads) if env_threads else cores
            workers = decide(
                "num_workers", 0 if loading == "in-memory" else min(2, max(cores - 1, 0)),
                "data is in memory: worker processes would only add overhead"
                if loading == "in-memory" else "streaming reads overlap compute",
            )
            reason = "OMP_NUM_THREADS" if env_threads else "all cores go to compute on CPU"
        else:
            workers = decide("num_workers", min(8, max(cores // max(c.hardware.devices, 1) - 1, 0)),
                             "cores per device minus one for the main process")
            threads = int(env_threads) if env_threads else max(1, cores // max(c.hardware.devices, 1))
            reason = "OMP_NUM_THREADS" if env_threads else "cores shared between device processes"
        threads = int(decide("torch_threads", threads, reason))
        return int(workers), threads

    def _time(self, c: PlanContext, threads: int, workers: int) -> dict[str, Any]:
        samples = c.train_samples * c.max_epochs
        if c.history and c.history[0].get("measured", {}).get("seconds_per_sample"):
            rate = c.history[0]["measured"]["seconds_per_sample"]
            return {"estimated_seconds": float(f"{samples * rate:.3g}"), "estimate_source": c.history[0]["id"]}
        if c.hardware.accelerator == "cpu":
            flops_per_second = _CPU_FLOPS_PER_CORE * threads
        else:
            flops_per_second = 1e14 * workers
        seconds = samples * c.facts.flops_per_sample / flops_per_second
        return {"estimated_seconds": float(f"{seconds:.3g}"), "estimate_source": "FLOPs"}


def _history_micro_batch(c: PlanContext) -> int | None:
    for run in c.history:
        micro = run.get("measured", {}).get("micro_batch_size")
        if micro:
            return int(micro)
    return None


def _human(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(int(n))


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
