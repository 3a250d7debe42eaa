"""How long one optimizer step of a data × tensor × pipeline layout takes: compute, the pipeline's bubble and each
factor's communication over the links it crosses — the figure ``plan_layout`` ranks layouts by.

Per optimizer step, for ``P`` parameters, ``dp × tp × pp`` devices, ``m`` micro-batches of ``b`` samples per
replica (gradient accumulation) and ``n`` pipeline micro-batches per batch:

* **compute**: the step's FLOPs over the devices' rate (a GPU's datasheet peak × ``ASSUMED_MFU``; a CPU core's
  ``CPU_FLOPS_PER_CORE``, with processes beyond the cores sharing them), stretched by the bubble
  ``(pp − 1) / (2n + pp − 1)`` of an interleaved 1F1B schedule of two stages per device — on CPUs shared by more
  processes than cores, a stage that waits lends its core to the others, so the bubble costs only what the cores
  cannot absorb;
* **data parallel** (FSDP2): every micro-batch all-gathers the weights for the forward and again for the backward
  and reduce-scatters the gradients — ``(dp − 1) / dp`` of ``P / (tp · pp)`` weights (2 B each in 16-bit, 4 in
  fp32) twice and gradients (4 B) once, three collectives per sharded unit;
* **tensor parallel**: the outputs of the row-wise split modules (``ModelFacts.tensor_parallel_bytes_per_sample``)
  are reduced in the forward and their inputs' gradients in the backward, ``2 (tp − 1) / tp`` of them per device
  (ring), one collective each — two under sequence parallel, for the same bytes — each also costing the host its
  redistribution; a stage holds ``1 / pp`` of them;
* **pipeline**: each micro-batch's activation crosses each stage boundary forward and its gradient backward.

A collective costs its link's latency plus its bytes over the link's bandwidth. Tensor parallel stays inside a
node; data parallel and pipeline stages cross nodes when the layout does. On GPUs the data-parallel traffic runs
beside the compute (FSDP2 prefetches the next unit's weights) and only what exceeds the compute is added; on CPUs
(gloo) every byte is copied by the cores that compute, so it all adds.
"""

from __future__ import annotations

from dataclasses import dataclass

from twinkle_core.parallel import pipeline_micro_batches
from twinkle_core.planning.estimate import ModelFacts
from twinkle_core.planning.hardware import Hardware, device_peak_table

ASSUMED_MFU = 0.4
"""Model-FLOPs utilisation assumed for a GPU (well-tuned large-model training reaches 0.35–0.5)."""
CPU_FLOPS_PER_CORE = 3.2e10
"""FP32 FLOP/s one CPU core sustains training a small transformer with one thread (llama-60m on the 2-core bench
machine, ``bench/results/layouts.json``: its pipeline run)."""
STAGES_PER_DEVICE = 2
"""Pipeline stages each device runs, interleaved (as ``twinkle_core.pipelining`` cuts a network with layers enough):
the bubble of ``n`` micro-batches is ``(pp − 1) / (2n + pp − 1)``."""


@dataclass(frozen=True)
class Link:
    """The connection a collective runs over.

    Attributes:
        name: what it is, for the plan's reasons.
        latency: seconds every collective costs whatever its size.
        bandwidth: bytes per second one device moves.
        overlaps: whether traffic runs beside the compute (GPU copy engines) rather than on the cores that compute.
        redistribution: host seconds each tensor-parallel collective costs beyond the link (DTensor's bookkeeping
            and copies around it).
    """

    name: str
    latency: float
    bandwidth: float
    overlaps: bool
    redistribution: float = 5e-5

    def seconds(self, collectives: float, nbytes: float) -> float:
        """Time for ``collectives`` collectives moving ``nbytes`` per device in all."""
        return collectives * self.latency + nbytes / self.bandwidth


GLOO_LOOPBACK = Link("gloo over loopback", 2.5e-3, 5e8, False, 6.5e-3)
"""Processes of one machine without accelerators, one core each: a 2-process gloo all-reduce takes 1–3 ms however
small, a reduce-scatter moves about 0.6 GB/s and an all-gather of large tensors much less
(``bench/links.py``, ``bench/results/links.json``); FSDP2's traffic in ``bench/layouts.py`` moved about 0.5 GB/s.
A tensor-parallel collective there costs about 9 ms in all: the redistribution's 6.5 ms is calibrated on its
tp 2 run. With more processes than cores, each figure worsens by their ratio (``links``)."""
NVLINK = Link("NVLink", 1e-5, 3.6e11, True)
"""NVLink/NVSwitch inside an H100/H200/A100 node (NCCL all-reduce bus bandwidth)."""
PCIE = Link("PCIe", 2e-5, 2.5e10, True)
"""GPUs of one node joined only through PCIe."""
INFINIBAND = Link("InfiniBand", 2e-5, 4.5e10, True)
"""One 400 Gb/s NIC per GPU between nodes."""
ETHERNET = Link("Ethernet", 3e-5, 1.25e10, True)
"""100 Gb/s Ethernet between nodes (assumed when the interconnect is not described)."""


def links(hardware: Hardware) -> tuple[Link, Link]:
    """``(inside a node, between nodes)`` for ``hardware``: its described ``interconnect`` (``"nvlink"``,
    ``"pcie"``, ``"infiniband"``, ``"ethernet"``), else NVLink for H100/H200/A100 nodes and Ethernet between them;
    CPU processes talk through gloo, each collective the slower the more processes share a core."""
    if hardware.accelerator == "cpu":
        crowding = max(1.0, hardware.devices / max(hardware.cpu_count, 1))
        link = Link(GLOO_LOOPBACK.name, GLOO_LOOPBACK.latency * crowding, GLOO_LOOPBACK.bandwidth / crowding, False,
                    GLOO_LOOPBACK.redistribution * crowding)
        return link, link
    described = (hardware.interconnect or "").lower()
    if "nvlink" in described or (not described and any(m in hardware.device_name for m in ("H100", "H200", "A100"))):
        inside = NVLINK
    else:
        inside = PCIE
    between = INFINIBAND if "infiniband" in described or "ib" in described.split("+") else ETHERNET
    return inside, between


def compute_rate(hardware: Hardware, mixed: bool) -> float | None:
    """FLOP/s one device sustains (``None`` for a GPU of unknown peak)."""
    if hardware.accelerator == "cpu":
        return CPU_FLOPS_PER_CORE
    peak = device_peak_table(hardware.device_name, "16" if mixed else "32")
    return peak * ASSUMED_MFU if peak else None


def pipeline_bubble(batch: int, stages: int) -> float:
    """The idle share of a pipeline of ``stages`` devices running a batch of ``batch`` samples."""
    if stages <= 1:
        return 0.0
    chunks, _ = pipeline_micro_batches(batch, stages, STAGES_PER_DEVICE)
    return (stages - 1) / (STAGES_PER_DEVICE * chunks + stages - 1)


def step_seconds(facts: ModelFacts, hardware: Hardware, global_batch: int, micro_batch: int, mixed: bool,
                 data: int, tensor: int, pipeline: int) -> dict[str, float] | None:
    """Estimated seconds per optimizer step by part (``compute`` with the bubble, ``data``, ``tensor``,
    ``pipeline``) and ``total``; ``None`` without a known compute rate. See the module docstring."""
    rate = compute_rate(hardware, mixed)
    if rate is None:
        return None
    per_node = max(hardware.devices, 1)
    devices = data * tensor * pipeline
    inside, between = links(hardware)
    micro_batches = max(global_batch // max(data * micro_batch, 1), 1)
    chunks = pipeline_micro_batches(micro_batch, pipeline, STAGES_PER_DEVICE)[0] if pipeline > 1 else 1
    bubble = pipeline_bubble(micro_batch, pipeline)
    work = facts.flops_per_sample * global_batch
    compute = work / (devices * rate) / (1 - bubble)
    if hardware.accelerator == "cpu":  # processes beyond the cores share them; waiting stages lend theirs
        compute = max(compute, work / (min(devices, max(hardware.cpu_count, 1)) * rate))
    scale = 0.5 if mixed else 1.0
    parts = {"compute": compute, "data": 0.0, "tensor": 0.0, "pipeline": 0.0}
    if data > 1:
        link = inside if devices <= per_node else between
        shard = facts.parameters / (tensor * pipeline) * (data - 1) / data
        moved = shard * (2 * (2 if mixed else 4) + 4)
        seconds = micro_batches * link.seconds(3 * facts.shard_units / pipeline, moved)
        parts["data"] = max(0.0, seconds - compute) if link.overlaps else seconds
    if tensor > 1:
        moved = 2 * (tensor - 1) / tensor * facts.tensor_parallel_bytes_per_sample * scale * micro_batch / pipeline
        collectives = facts.tensor_parallel_collectives / pipeline
        parts["tensor"] = micro_batches * (inside.seconds(collectives, moved) + collectives * inside.redistribution)
    if pipeline > 1:
        link = inside if tensor * pipeline <= per_node else between
        sends = 2 * chunks * (2 * STAGES_PER_DEVICE - 1)  # forward and backward across each of its boundaries
        moved = sends * facts.boundary_bytes_per_sample * scale * micro_batch / chunks / tensor
        parts["pipeline"] = micro_batches * link.seconds(sends, moved)
    return {**parts, "bubble": bubble, "total": sum(parts.values())}
