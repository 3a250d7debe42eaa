"""Data × tensor × pipeline parallel layouts for models whose training state does not fit one device.

``plan_layout`` works from measurements and arithmetic alone (nothing is allocated: measure a large model on the
meta device), for the machine at hand or a described cluster (``Hardware.cluster``). Per device, with ``P``
parameters, tensor-parallel degree ``tp``, pipeline stages ``pp`` and data-parallel replicas ``dp``, as the engine
runs it (FSDP2 over the replicas, weights kept in fp32 and computed in 16 bits under mixed precision):

* weights, gradients and AdamW's two moments: ``(4 + 4 + 8) · P / (tp · pp · dp)`` bytes;
* weights FSDP2 gathers for the unit it computes and the one it prefetches: two of the stage's sharded units
  (``ModelFacts.shard_units``), in 16 or 32 bits, when ``dp > 1``;
* activations: the measured bytes per sample × micro-batch, divided by ``tp`` (tensor parallel splits them;
  a 1F1B pipeline stage holds ``pp`` micro-batches of ``1/pp`` of the layers, so ``pp`` cancels), halved
  in 16-bit.

Every layout the devices allow is tried — tensor parallel only inside a node and only for a model that supplies a
tensor-parallel plan, pipeline stages only for one that cuts its network — and of those whose memory fits 80 % of a
device, the one with the shortest estimated step wins (``twinkle_core.planning.timing``: compute, the pipeline's
bubble and each factor's communication); a tie goes to the least communication (data parallel, then tensor
parallel, then stages). Without a known compute rate (a GPU not in the peak table), the first layout that fits in
that order wins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle_core.planning.estimate import ModelFacts
from twinkle_core.planning.hardware import Hardware, nbytes
from twinkle_core.planning.timing import links, pipeline_bubble, step_seconds

MEMORY_BUDGET = 0.8
"""The share of a device's memory a layout may plan for (the rest: allocator slack, buffers, fragmentation)."""


@dataclass
class Layout:
    """A data × tensor × pipeline layout and the arithmetic behind it.

    Attributes:
        data: data-parallel replicas (``dp``, FSDP2).
        tensor: tensor-parallel degree (``tp``, within a node).
        pipeline: pipeline stages (``pp``).
        micro_batch_size: samples per micro-batch per replica.
        micro_batches: micro-batches per optimizer step per replica (gradient accumulation).
        memory: bytes per device by part (``state``, ``gathered``, ``activations``) and ``total``.
        budget_bytes: the memory a device may use (80 % of it).
        bubble: the pipeline's idle share.
        step_seconds: estimated seconds per optimizer step (``None`` without a known compute rate).
        reasons: one line per factor.
        seconds: the step's estimate by part (``compute`` with the bubble, ``data``, ``tensor``, ``pipeline``).
        alternatives: the other layouts that fit, fastest first (``"dp 2 × tp 1 × pp 1"`` → seconds per step).
    """

    data: int
    tensor: int
    pipeline: int
    micro_batch_size: int
    micro_batches: int
    memory: dict[str, int]
    budget_bytes: int
    bubble: float
    step_seconds: float | None
    reasons: list[str]
    seconds: dict[str, float] = field(default_factory=dict)
    alternatives: dict[str, float | None] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        """Devices the layout uses: ``dp × tp × pp``."""
        return self.data * self.tensor * self.pipeline

    @property
    def model_parallel(self) -> int:
        """Devices that hold one copy of the model between them as it runs: ``tp × pp``; the other factor,
        ``dp``, counts the copies that each read their own batches."""
        return self.tensor * self.pipeline

    def name(self) -> str:
        """``"dp 8 × tp 2 × pp 1"``."""
        return f"dp {self.data} × tp {self.tensor} × pp {self.pipeline}"

    def describe(self) -> str:
        """``"dp 8 × tp 2 × pp 1 (FSDP2)"`` (the engine over the replicas, when there are several)."""
        return f"{self.name()} (FSDP2)" if self.data > 1 else self.name()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {**asdict(self), "devices": self.devices, "layout": self.describe()}


def memory_per_device(parameters: int, activation_bytes_per_sample: int, micro_batch: int, data: int, tensor: int,
                      pipeline: int, mixed: bool = True, shard_units: int = 1) -> dict[str, int]:
    """Bytes per device by part for a layout (see the module docstring)."""
    stage = parameters / (tensor * pipeline)
    units = max(shard_units / pipeline, 1.0)
    parts = {
        "state": int(16 * stage / data),
        "gathered": int(min(2 / units, 1.0) * stage * (2 if mixed else 4)) if data > 1 else 0,
        "activations": int(activation_bytes_per_sample * (0.5 if mixed else 1.0) * micro_batch / tensor),
    }
    return {**parts, "total": sum(parts.values())}


def _powers_of_two(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def _halvings(value: int) -> list[int]:
    out = [value]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def layout_for(facts: ModelFacts, hardware: Hardware, global_batch: int, micro_batch: int, mixed: bool, data: int,
               tensor: int, pipeline: int, splits_tensors: bool = True) -> Layout:
    """The ``data × tensor × pipeline`` layout given, with its memory per device, bubble, time and reasons
    (whether or not it fits: compare ``memory["total"]`` with ``budget_bytes``)."""
    per_node = max(hardware.devices, 1)
    budget = int(MEMORY_BUDGET * hardware.device_memory_bytes)
    memory = memory_per_device(facts.parameters, facts.activation_bytes_per_sample, micro_batch, data, tensor,
                               pipeline, mixed, facts.shard_units)
    micro_batches = max(global_batch // max(data * micro_batch, 1), 1)
    seconds = step_seconds(facts, hardware, global_batch, micro_batch, mixed, data, tensor, pipeline)
    bubble = seconds.pop("bubble") if seconds else pipeline_bubble(micro_batch, pipeline)
    layout = Layout(data, tensor, pipeline, micro_batch, micro_batches, memory, budget, round(bubble, 4),
                    seconds["total"] if seconds else None, [], seconds={k: round(v, 6) for k, v in
                                                                    (seconds or {}).items()})
    layout.reasons = _reasons(layout, per_node, hardware, splits_tensors)
    return layout


def plan_layout(facts: ModelFacts, hardware: Hardware, global_batch: int, micro_batch: int | None = None,
                mixed: bool = True, splits_tensors: bool = True, cuts_stages: bool = True) -> Layout | None:
    """The fastest layout whose memory fits (see the module docstring), or ``None`` when none does.

    Each layout gets the largest micro-batch that fits, from a replica's whole share of ``global_batch`` halving
    down (fewer micro-batches: less traffic per step and a smaller bubble), or ``micro_batch`` when given. Without
    ``splits_tensors`` (the model supplies no tensor-parallel plan), or without the plan's traffic in ``facts``
    (``tensor_parallel_collectives``: its plan could not be read before the processes exist), only layouts of
    ``tp 1``; without ``cuts_stages`` only ``pp 1``.
    """
    per_node, total = max(hardware.devices, 1), max(hardware.devices, 1) * max(hardware.nodes, 1)
    fits: list[Layout] = []
    splits = splits_tensors and facts.tensor_parallel_collectives > 0  # a tensor factor only with known traffic
    for pipeline in _powers_of_two(total if cuts_stages else 1):
        for tensor in _powers_of_two(per_node if splits else 1):
            if total % (tensor * pipeline):
                continue
            data = total // (tensor * pipeline)
            sizes = [micro_batch] if micro_batch else _halvings(max(global_batch // data, 1))
            for micro in sizes:
                layout = layout_for(facts, hardware, global_batch, micro, mixed, data, tensor, pipeline,
                                    splits)
                if layout.memory["total"] <= layout.budget_bytes:
                    fits.append(layout)
                    break
    if not fits:
        return None
    if any(layout.step_seconds is None for layout in fits):  # no compute rate: the least communication
        return fits[0]
    ranked = sorted(fits, key=lambda layout: layout.step_seconds)  # stable: ties keep the least communication
    best = ranked[0]
    best.alternatives = {other.name(): round(other.step_seconds, 6) for other in ranked[1:]}
    if len(ranked) > 1:
        runner = ranked[1]
        best.reasons.append(f"fastest of {len(ranked)} layouts that fit: {_step(best)} per step against "
                            f"{_step(runner)} for {runner.name()}")
    return best


def _step(layout: Layout) -> str:
    """``"1.2 s (compute 0.9, data 0.2, tensor 0.1)"``."""
    parts = ", ".join(f"{k} {v:.3g}" for k, v in layout.seconds.items() if k != "total" and v > 0)
    return f"{layout.step_seconds:.3g} s ({parts})"


def _reasons(layout: Layout, per_node: int, hardware: Hardware, splits_tensors: bool = True) -> list[str]:
    memory, budget, tensor, pipeline = layout.memory, layout.budget_bytes, layout.tensor, layout.pipeline
    inside, between = links(hardware)
    seconds = layout.seconds
    reasons = []
    if tensor == 1 and not splits_tensors:
        reasons.append("tp 1: the model supplies no tensor-parallel plan (Algorithm.tensor_parallel_plan) that the "
                       "planner could read, so it is not split")
    elif tensor == 1:
        reasons.append("tp 1: not split")
    else:
        reasons.append(f"tp {tensor}: tensor parallel stays inside a node ({per_node} devices, {inside.name})"
                       + (f"; its collectives take {seconds['tensor']:.3g} s per step" if seconds else ""))
    if pipeline == 1:
        reasons.append("pp 1: no pipeline stages")
    else:
        crossing = inside if tensor * pipeline <= per_node else between
        reasons.append(f"pp {pipeline}: stages send activations over {crossing.name}; bubble {layout.bubble:.0%}")
    held = f"{nbytes(memory['total'])} per device of {nbytes(budget)}"
    if layout.data == 1:
        reasons.append(f"dp 1: one copy of the model: {held}")
    else:
        reasons.append(f"dp {layout.data}: FSDP2 shards weights, gradients and optimizer state over the replicas: "
                       f"{held}" + (f"; its traffic adds {seconds['data']:.3g} s per step" if seconds else ""))
    return reasons
