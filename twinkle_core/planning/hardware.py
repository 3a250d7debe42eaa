"""``Hardware``: what this process can train on."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from twinkle_core.processes import inside_ray_worker


@dataclass(frozen=True)
class Hardware:
    """The machine a plan is made for.

    Attributes:
        accelerator: ``"cuda"`` or ``"cpu"``.
        devices: accelerators per node (CPU: 1).
        device_name: e.g. ``"NVIDIA H200"`` or ``"cpu"``.
        device_memory_bytes: memory of one accelerator (CPU: host memory).
        bf16: whether the device computes in bfloat16 natively.
        fp16: whether the device has fast float16.
        cpu_count: usable CPU cores: the scheduler affinity, lowered to the cgroup's CPU quota where one is set
            (``cpu_budget``).
        memory_bytes: host memory.
        nodes: machines taking part (the launcher's, else ``TWINKLE_NUM_NODES``, default 1).
        deepspeed: whether DeepSpeed is installed (the ``twinkle-core[deepspeed]`` extra).
        launcher: the launcher that started this job's processes (``"torchrun"``, ``"slurm"``), if any.
        processes_per_node: the processes it started on each node (0 without a launcher).
        interconnect: the links between devices and nodes, as described (``"nvlink+infiniband"``), if known.
        cpu_affinity: the cores the scheduler lets this process run on (0: not known).
        cpu_quota: the cgroup's CPU quota in cores (``cpu.max``; ``None``: no quota).
    """

    accelerator: str
    devices: int
    device_name: str
    device_memory_bytes: int
    bf16: bool
    fp16: bool
    cpu_count: int
    memory_bytes: int
    nodes: int = 1
    deepspeed: bool = False
    launcher: str | None = None
    processes_per_node: int = 0
    interconnect: str | None = None
    cpu_affinity: int = 0
    cpu_quota: float | None = None

    @property
    def cpu_budget_reason(self) -> str:
        """Where ``cpu_count`` comes from, in words (``"2 cores: affinity 2, no cgroup quota"``)."""
        quota = "no cgroup quota" if self.cpu_quota is None else f"cgroup quota {self.cpu_quota:g} cores"
        affinity = f"affinity {self.cpu_affinity}" if self.cpu_affinity else "affinity not known"
        return f"{self.cpu_count} core{'s' if self.cpu_count != 1 else ''}: {affinity}, {quota}"

    @classmethod
    def cluster(cls, devices: int, device_memory: str | int, nodes: int = 1, interconnect: str | None = None,
                device_name: str = "NVIDIA H100", bf16: bool = True, cpu_count: int = 64,
                memory: str | int = "1TB") -> Hardware:
        """A described cluster to plan for: ``Hardware.cluster(devices=8, device_memory="80GB", nodes=2)``.

        ``devices`` is per node; sizes take bytes or ``"80GB"``/``"512GiB"``-style strings.
        """
        return cls("cuda", devices, device_name, parse_bytes(device_memory), bf16, True, cpu_count,
                   parse_bytes(memory), nodes, interconnect=interconnect)

    @property
    def key(self) -> str:
        """A short identity used to match run history: ``"cuda:NVIDIA H200x8"``, ``"cpu:2"``."""
        if self.accelerator == "cpu":
            return f"cpu:{self.cpu_count}"
        return f"{self.accelerator}:{self.device_name}x{self.devices}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {**asdict(self), "key": self.key}

    @classmethod
    def detect(cls) -> Hardware:
        """Inspect this process: CUDA devices through torch, cores from the scheduler affinity."""
        import importlib.util

        import torch

        deepspeed = importlib.util.find_spec("deepspeed") is not None
        cpus, affinity, quota = cpu_budget()
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        launched = launched_world()
        launcher, nodes, per_node = launched or (None, int(os.environ.get("TWINKLE_NUM_NODES", "1")), 0)
        extra = {"launcher": launcher, "processes_per_node": per_node, "cpu_affinity": affinity, "cpu_quota": quota}
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return cls(
                accelerator="cuda",
                devices=torch.cuda.device_count(),
                device_name=props.name,
                device_memory_bytes=int(props.total_memory),
                bf16=bool(torch.cuda.is_bf16_supported()),
                fp16=props.major >= 7,
                cpu_count=cpus,
                memory_bytes=memory,
                nodes=nodes,
                deepspeed=deepspeed,
                **extra,
            )
        return cls("cpu", 1, "cpu", memory, bool(cpu_description().bf16_flags), False, cpus, memory, nodes,
                   deepspeed, **extra)


def cpu_budget(root: str = "/sys/fs/cgroup") -> tuple[int, int, float | None]:
    """The cores this process may use: ``(cores, affinity, quota)`` — the scheduler affinity, lowered to the
    cgroup's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``) rounded down, at least
    one. A container limited to 2 CPUs on a 64-core host has an affinity of 64 and a quota of 2: threads sized by
    the core count would oversubscribe it 32 times."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota: float | None = None
    try:
        with open(os.path.join(root, "cpu.max"), encoding="utf-8") as handle:
            limit, period = (handle.read().split() + ["", ""])[:2]
        if limit != "max" and period:
            quota = int(limit) / int(period)
    except (OSError, ValueError):
        try:
            with open(os.path.join(root, "cpu", "cpu.cfs_quota_us"), encoding="utf-8") as handle:
                limit_us = int(handle.read().strip())
            with open(os.path.join(root, "cpu", "cpu.cfs_period_us"), encoding="utf-8") as handle:
                period_us = int(handle.read().strip())
            if limit_us > 0 and period_us > 0:
                quota = limit_us / period_us
        except (OSError, ValueError):
            pass
    cores = affinity if quota is None else max(1, min(affinity, int(quota)))
    return cores, affinity, quota


@dataclass(frozen=True)
class CPU:
    """This machine's processor, as the kernel describes it.

    Attributes:
        name: the model name (``"AMD EPYC 9554 64-Core Processor"``), or the architecture when none is given.
        cores: the cores this process may run on.
        bf16_flags: the instruction-set flags by which it computes bfloat16 natively (``avx512_bf16``,
            ``amx_bf16`` on x86; ``bf16`` on Arm), empty when it has none.
    """

    name: str
    cores: int
    bf16_flags: tuple[str, ...]


BF16_CPU_FLAGS: tuple[str, ...] = ("avx512_bf16", "amx_bf16", "bf16")
"""``/proc/cpuinfo`` flags (x86 ``flags``, Arm ``Features``) of native bfloat16 arithmetic."""


def cpu_description(cpuinfo: str | None = None) -> CPU:
    """This machine's CPU from ``/proc/cpuinfo`` (or the text ``cpuinfo``): its name, usable cores and bf16 flags.
    Where there is no ``/proc/cpuinfo`` (macOS), the name is the architecture and no flag is known."""
    import platform

    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    name = fields.get("model name") or fields.get("Model") or platform.machine() or "cpu"
    return CPU(name, cores, tuple(flag for flag in BF16_CPU_FLAGS if flag in flags))


def launched_world() -> tuple[str, int, int] | None:
    """``(launcher, nodes, processes per node)`` when Ray Train, torchrun or SLURM started this job's processes."""
    env = os.environ
    try:
        if inside_ray_worker() and env.get("WORLD_SIZE"):  # inside a Ray Train worker
            per_node, world = int(env.get("LOCAL_WORLD_SIZE", "1")), int(env["WORLD_SIZE"])
            return "ray", max(world // max(per_node, 1), 1), per_node
        if env.get("TORCHELASTIC_RUN_ID") and env.get("LOCAL_WORLD_SIZE") and env.get("WORLD_SIZE"):
            per_node, world = int(env["LOCAL_WORLD_SIZE"]), int(env["WORLD_SIZE"])
            return "torchrun", max(world // max(per_node, 1), 1), per_node
        if env.get("SLURM_NTASKS") and env.get("SLURM_STEP_ID") and env.get("SLURM_JOB_NAME") not in ("bash",
                                                                                                    "interactive"):
            nodes = int(env.get("SLURM_NNODES", "1"))
            return "slurm", nodes, max(int(env["SLURM_NTASKS"]) // max(nodes, 1), 1)
    except ValueError:  # a malformed variable: not a launch Twinkle can read
        return None
    return None


GPU_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    # dense (no sparsity) datasheet peaks; "32" is TF32 tensor cores where the GPU has them
    "H200": {"16": 989.0, "32": 494.0},
    "H100": {"16": 989.0, "32": 494.0},
    "A100": {"16": 312.0, "32": 156.0},
    "A10": {"16": 125.0, "32": 62.5},
    "L40S": {"16": 362.0, "32": 183.0},
    "L4": {"16": 121.0, "32": 60.0},
    "V100": {"16": 125.0, "32": 15.7},
    "T4": {"16": 65.0, "32": 8.1},
    "RTX 4090": {"16": 165.0, "32": 82.6},
    "RTX 3090": {"16": 71.0, "32": 35.6},
}
"""Peak dense TFLOP/s per GPU model, for 16-bit (bf16/fp16) and 32-bit (TF32) training."""


def device_peak_table(device_name: str, bits: str) -> float | None:
    """The datasheet peak FLOP/s of a GPU model for ``bits`` (``"16"`` or ``"32"``), if known."""
    for model, peaks in GPU_PEAK_TFLOPS.items():
        if model in device_name:
            return peaks[bits] * 1e12
    return None


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
          "GIB": 2**30, "TIB": 2**40}


def nbytes(n: float) -> str:
    """A size in kB/MB/GB/TB (``parse_bytes``'s inverse, for reading)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def parse_bytes(value: str | int) -> int:
    """``"80GB"`` → 80·10⁹, ``"512GiB"`` → 512·2³⁰, an int unchanged.

    Raises:
        ValueError: not a size; the message names the value.
    """
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    if unit not in _UNITS or not number:
        raise ValueError(f"{value!r} is not a size; write e.g. 80GB or 512GiB")
    return int(float(number) * _UNITS[unit])
