"""Data × tensor × pipeline parallel layouts for models whose training state does not fit one device.

``plan_layout`` works from memory arithmetic alone (nothing is allocated: measure a large model on the meta
device), for the machine at hand or a described cluster (``Hardware.cluster``). Per device, with
``P`` parameters, tensor-parallel degree ``tp``, pipeline stages ``pp`` and data-parallel replicas ``dp``:

* weights and gradients: ``(2 + 2) · P / (tp · pp)`` bytes in 16-bit mixed precision (``(4 + 4)`` in fp32);
* optimizer state — AdamW's fp32 master weights and two moments, ``12 · P`` bytes (``8 · P`` in fp32) —
  sharded over the data-parallel replicas (ZeRO stage 1): ``/ (tp · pp · dp)``;
* activations: the measured bytes per sample × micro-batch, divided by ``tp`` (tensor parallel splits them;
  a 1F1B pipeline stage holds ``pp`` micro-batches of ``1/pp`` of the layers, so ``pp`` cancels), halved
  in 16-bit.

Layouts are tried from the least communication to the most: pure data parallel, then tensor parallel inside
a node (it all-reduces activations every layer, so it needs the node's fast links) up to the devices per node,
then pipeline stages (which send activations point to point, fine across nodes); the first that fits 80 % of
a device's memory wins. The time per step is the step's FLOPs over the devices' peak at an assumed MFU,
stretched by the pipeline bubble ``(pp − 1) / (m + pp − 1)`` for ``m`` micro-batches per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from twinkle_core.planning.hardware import Hardware, device_peak_table, nbytes

MEMORY_BUDGET = 0.8
"""The share of a device's memory a layout may plan for (the rest: allocator slack, buffers, fragmentation)."""
ASSUMED_MFU = 0.4
"""Model-FLOPs utilisation assumed for the time estimate (well-tuned large-model training reaches 0.35–0.5)."""


@dataclass
class Layout:
    """A data × tensor × pipeline layout and the arithmetic behind it.

    Attributes:
        data: data-parallel replicas (``dp``).
        tensor: tensor-parallel degree (``tp``, within a node).
        pipeline: pipeline stages (``pp``).
        micro_batch_size: samples per micro-batch per replica.
        micro_batches: micro-batches per optimizer step per replica (the pipeline's ``m``).
        memory: bytes per device by part (``weights``, ``gradients``, ``optimizer``, ``activations``) and ``total``.
        budget_bytes: the memory a device may use (80 % of it).
        bubble: the pipeline's idle share.
        step_seconds: estimated seconds per optimizer step (``None`` without a known device peak).
        reasons: one line per factor.
        staged: whether the engine runs the pipeline stages as laid out (the model cuts into stages); without,
            a layout of ``pp > 1`` runs as FSDP2 over all its devices.
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
    staged: bool = False

    @property
    def devices(self) -> int:
        """Devices the layout uses: ``dp × tp × pp``."""
        return self.data * self.tensor * self.pipeline

    @property
    def model_parallel(self) -> int:
        """Devices that hold one copy of the model between them as it runs: ``tp × pp`` (``tp`` unless
        ``staged``); the other factor, ``dp``, counts the copies that each read their own batches."""
        return self.tensor * (self.pipeline if self.staged else 1)

    def describe(self) -> str:
        """``"dp 8 × tp 2 × pp 1 (ZeRO-1)"``."""
        return f"dp {self.data} × tp {self.tensor} × pp {self.pipeline} (ZeRO-1)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {**asdict(self), "devices": self.devices, "layout": self.describe()}


def memory_per_device(parameters: int, activation_bytes_per_sample: int, micro_batch: int, data: int, tensor: int,
                      pipeline: int, mixed: bool = True) -> dict[str, int]:
    """Bytes per device by part for a layout (see the module docstring)."""
    model_share = parameters / (tensor * pipeline)
    weight_bytes, optimizer_bytes = (2, 12) if mixed else (4, 8)
    parts = {
        "weights": int(weight_bytes * model_share),
        "gradients": int(weight_bytes * model_share),
        "optimizer": int(optimizer_bytes * model_share / data),
        "activations": int(activation_bytes_per_sample * (0.5 if mixed else 1.0) * micro_batch / tensor),
    }
    return {**parts, "total": sum(parts.values())}


def _powers_of_two(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def layout_for(parameters: int, activation_bytes_per_sample: int, flops_per_sample: int, hardware: Hardware,
               global_batch: int, micro_batch: int, mixed: bool, data: int, tensor: int, pipeline: int,
               splits_tensors: bool = True) -> Layout:
    """The ``data × tensor × pipeline`` layout given, with its memory per device, bubble, time and reasons
    (whether or not it fits: compare ``memory["total"]`` with ``budget_bytes``)."""
    per_node = max(hardware.devices, 1)
    total = data * tensor * pipeline
    budget = int(MEMORY_BUDGET * hardware.device_memory_bytes)
    memory = memory_per_device(parameters, activation_bytes_per_sample, micro_batch, data, tensor, pipeline, mixed)
    micro_batches = max(global_batch // max(data * micro_batch, 1), 1)
    bubble = (pipeline - 1) / (micro_batches + pipeline - 1)
    peak = device_peak_table(hardware.device_name, "16" if mixed else "32")
    seconds = (flops_per_sample * global_batch / (total * peak * ASSUMED_MFU) / (1 - bubble)) if peak else None
    return Layout(data, tensor, pipeline, micro_batch, micro_batches, memory, budget, round(bubble, 4), seconds,
                  _reasons(parameters, memory, budget, data, tensor, pipeline, per_node, hardware, bubble,
                           splits_tensors))


def plan_layout(parameters: int, activation_bytes_per_sample: int, flops_per_sample: int, hardware: Hardware,
                global_batch: int, micro_batch: int = 1, mixed: bool = True,
                splits_tensors: bool = True) -> Layout | None:
    """The first layout (least communication first) whose memory fits, or ``None`` when none does; without
    ``splits_tensors`` (the model supplies no tensor-parallel plan) only layouts of ``tp 1``."""
    per_node, total = max(hardware.devices, 1), max(hardware.devices, 1) * max(hardware.nodes, 1)
    for pipeline in _powers_of_two(total):
        for tensor in _powers_of_two(per_node if splits_tensors else 1):
            if total % (tensor * pipeline):
                continue
            layout = layout_for(parameters, activation_bytes_per_sample, flops_per_sample, hardware, global_batch,
                                micro_batch, mixed, total // (tensor * pipeline), tensor, pipeline, splits_tensors)
            if layout.memory["total"] <= layout.budget_bytes:
                return layout
    return None


def _reasons(parameters: int, memory: dict[str, int], budget: int, data: int, tensor: int, pipeline: int,
             per_node: int, hardware: Hardware, bubble: float, splits_tensors: bool = True) -> list[str]:
    reasons = []
    if tensor == 1 and not splits_tensors:
        reasons.append("tp 1: the model supplies no tensor-parallel plan (Algorithm.tensor_parallel_plan), so it is "
                       "not split")
    elif tensor == 1:
        reasons.append(f"tp 1: {parameters / 1e9:.1f}B parameters' weights and gradients ({nbytes(memory['weights'] + memory['gradients'])}) "
                       "fit a device unsplit")
    else:
        reasons.append(f"tp {tensor}: smaller degrees leave more than {nbytes(budget)} per device; tensor "
                       f"parallel stays inside a node ({per_node} devices"
                       f"{', ' + hardware.interconnect if hardware.interconnect else ''})")
    reasons.append("pp 1: the model fits within one node's tensor-parallel group" if pipeline == 1 else
                   f"pp {pipeline}: the model needs {pipeline} stages beyond tp {tensor}; bubble {bubble:.0%}")
    reasons.append(f"dp {data}: the remaining devices replicate, optimizer state sharded over them (ZeRO-1): "
                   f"{nbytes(memory['total'])} per device of {nbytes(budget)}")
    return reasons

