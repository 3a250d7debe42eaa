"""``Plan``: how a run will use the hardware, every choice with a one-line reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from twinkle_core.planning.hardware import nbytes
from twinkle_core.types import TextEnum


class Precision(TextEnum):
    """A Lightning precision: how the weights and the arithmetic are stored."""

    FP64 = "64-true"
    FP32 = "32-true"
    FP16_MIXED = "16-mixed"
    BF16_MIXED = "bf16-mixed"
    FP16 = "16-true"
    BF16 = "bf16-true"


class Distribution(TextEnum):
    """How training is spread over devices — Lightning's ``strategy``."""

    AUTO = "auto"
    DDP = "ddp"
    FSDP2 = "fsdp2"
    DEEPSPEED_STAGE_2 = "deepspeed_stage_2"
    DEEPSPEED_STAGE_3 = "deepspeed_stage_3"
    DEEPSPEED_STAGE_3_OFFLOAD = "deepspeed_stage_3_offload"
    PIPELINE = "pipeline"


class PlanEstimates(TypedDict, total=False):
    """The figures behind a plan's choices (``Plan.estimates``; plain JSON in the run's record and checkpoints).

    Keys:
        hardware: the machine's key (``"cpu:2"``, ``"cuda:NVIDIA H200x8"``).
        parameters, trainable, flops_per_sample, activation_bytes_per_sample, state_bytes: the model's
            measurements (``ModelFacts``).
        data_bytes: the data's size on storage.
        train_samples: samples in the training split.
        optimizer_steps_per_epoch, optimizer_steps: optimizer steps per epoch and in all.
        estimated_seconds: the fit's expected duration: the training, with what an earlier run of the kind spent
            beyond its own (``estimated_overhead_seconds``) and this plan's own probe (``estimated_probe_seconds``).
        estimate_source: what that duration comes from: ``"probe"`` (the speed probe's measured step),
            ``"FLOPs"`` or the id of the past run that measured it.
        estimated_overhead_seconds: the part of ``estimated_seconds`` that an earlier run of the same algorithm,
            data and hardware spent beyond its own estimate (reading the data, building the model, Lightning's start,
            the sanity check, logging, the record), added to this one; absent without such a run.
        overhead_run: the id of that run.
        estimated_probe_seconds: the part of ``estimated_seconds`` this plan's speed probe took (measured for it,
            before planning; absent when the probe was read from the store or none ran).
        layout: the data × tensor × pipeline layout chosen, if any (``Layout.to_dict()``).
        probe: what the speed probe measured (``SpeedProbe.to_dict()``), if one ran or was reused.
    """

    hardware: str
    parameters: int
    trainable: int
    flops_per_sample: int
    activation_bytes_per_sample: int
    state_bytes: int
    data_bytes: int
    train_samples: int
    optimizer_steps_per_epoch: int
    optimizer_steps: int
    estimated_seconds: float
    estimate_source: str
    estimated_overhead_seconds: float
    overhead_run: str
    estimated_probe_seconds: float
    layout: dict[str, Any]
    probe: dict[str, Any]


@dataclass(frozen=True)
class ParallelDims:
    """How a job's processes share the model, as torchtitan's ``ParallelDims``: ``data`` replicas (each reads its
    own batches; FSDP2 shards them when the model is split, DDP otherwise) × ``tensor``-parallel degree × ``pipeline``
    stages, one process for each. ``Plan.layout`` holds it, checked against the plan's devices × nodes; the
    arithmetic that chose it (memory, time, the alternatives) stays in ``Plan.estimates["layout"]``.

    Attributes:
        data: data-parallel replicas (``dp``).
        tensor: devices one replica's layers are split over (``tp``).
        pipeline: consecutive stages one replica is cut into (``pp``).
    """

    data: int = 1
    tensor: int = 1
    pipeline: int = 1

    def __post_init__(self) -> None:
        """Refuse a degree that is not a positive integer.

        Raises:
            ValueError: naming the degree and its value.
        """
        for name in ("data", "tensor", "pipeline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelDims.{name} must be a positive integer, not {value!r}")

    @property
    def world_size(self) -> int:
        """The processes the layout takes: ``data × tensor × pipeline``."""
        return self.data * self.tensor * self.pipeline

    @property
    def model_parallel(self) -> int:
        """Processes that hold one copy of the model between them: ``tensor × pipeline``."""
        return self.tensor * self.pipeline

    @property
    def tensor_enabled(self) -> bool:
        """Whether each replica's layers are split (``tensor > 1``)."""
        return self.tensor > 1

    @property
    def pipeline_enabled(self) -> bool:
        """Whether each replica is cut into stages (``pipeline > 1``)."""
        return self.pipeline > 1

    def name(self) -> str:
        """``"dp 2 × tp 2 × pp 1"``."""
        return f"dp {self.data} × tp {self.tensor} × pp {self.pipeline}"

    def to_dict(self) -> dict[str, int]:
        """JSON-ready values."""
        return {"data": self.data, "tensor": self.tensor, "pipeline": self.pipeline}

    @classmethod
    def from_estimates(cls, layout: dict[str, Any] | None, world_size: int) -> ParallelDims:
        """The degrees of a plan stored before ``Plan.layout`` existed: from its ``estimates["layout"]`` (where a
        layout not ``staged``, written before 0.4, ran its stages as FSDP2), else ``world_size`` replicas."""
        if not layout:
            return cls(data=max(int(world_size), 1))
        tensor = int(layout.get("tensor", 1))
        pipeline = int(layout.get("pipeline", 1)) if layout.get("staged", True) else 1
        return cls(data=max(int(world_size) // (tensor * pipeline), 1), tensor=tensor, pipeline=pipeline)


@dataclass
class Decision:
    """One choice of a plan: its name, value and the reason in one line."""

    name: str
    value: Any
    reason: str


@dataclass
class Plan:
    """The resource plan of a run, stored with it and printed before training.

    Attributes:
        accelerator: ``"cpu"`` or ``"cuda"``.
        devices: accelerators per node.
        num_nodes: machines.
        precision: a Lightning precision (``Precision``: ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ...).
        strategy: the distribution (``Distribution``): ``"auto"``, ``"ddp"``, ``"fsdp2"`` (Lightning's
            ``ModelParallelStrategy``: FSDP2, on CPU or GPU), a DeepSpeed ZeRO stage
            (``"deepspeed_stage_3_offload"``; CUDA with the ``deepspeed`` extra) or ``"pipeline"``. Both are
            text enums: each member equals its text (``plan.strategy == "ddp"``).
        micro_batch_size: samples per device per step.
        accumulate_grad_batches: micro-batches per optimizer step.
        effective_batch_size: samples per optimizer step (micro × accumulation × devices × nodes).
        data_loading: ``"in-memory"`` or ``"sharded"`` (streamed from shards: data larger than memory).
        num_workers: data-loader worker processes.
        gradient_compression: DDP's gradient all-reduce: ``"none"``, ``"powersgd"``, ``"bf16"`` or ``"fp16"``
            (see ``twinkle_core.engine.compression``).
        torch_threads: intra-op threads per process.
        memory_format: the weights' layout: ``"contiguous"`` or ``"channels_last"`` (convolutional networks).
        allocator: the training process's ``malloc`` thresholds: ``"default"``, or ``"retain"`` (freed memory kept
            in the process; ``twinkle_core.engine.allocator``).
        compile: ``"off"``, or the ``torch.compile`` mode the network is compiled with.
        precision_switching: ``"on"``: a CPU training with native bf16 re-times its step in the other of
            bf16-mixed and fp32 now and then and goes on in the faster (``precision`` is where it starts; see
            ``twinkle_core.engine.precision``); ``"off"``: ``precision`` throughout.
        checkpoint_every_n_epochs: write ``last.ckpt`` after every this many epochs (and always after the last).
        max_epochs: epochs to train (-1: ``max_steps`` ends the training; ``None``: the plan did not decide it — a
            strategy without ``TrainingLengthDecider``, or a plan an earlier release stored — and the trainer's
            setting applies).
        val_check_interval: validate every this many training batches (a fraction: of an epoch); ``None``: once
            an epoch.
        resource_strategy: the resource strategy that made the plan (its registered name; ``strategy`` is the
            distribution — one word, one meaning; the old name ``strategy_name`` reads it, with a
            ``DeprecationWarning``).
        estimates: figures behind the choices (parameters, FLOPs, memory, steps, time).
        decisions: every choice with its reason, in order.
        history_run: the earlier run whose measurements were reused, if any.
        layout: the processes' data × tensor × pipeline degrees (``ParallelDims``; their product is
            ``devices × num_nodes``). Given as ``None`` (or left out), every process is a data-parallel replica.
    """

    accelerator: str
    devices: int
    num_nodes: int
    precision: Precision
    strategy: Distribution
    micro_batch_size: int
    accumulate_grad_batches: int
    effective_batch_size: int
    data_loading: str
    num_workers: int
    torch_threads: int
    memory_format: str = "contiguous"
    allocator: str = "default"
    compile: str = "off"
    precision_switching: str = "off"
    checkpoint_every_n_epochs: int = 1
    resource_strategy: str = "default"
    gradient_compression: str = "none"
    max_epochs: int | None = None
    val_check_interval: float | None = None
    estimates: PlanEstimates = field(default_factory=lambda: PlanEstimates())
    decisions: list[Decision] = field(default_factory=list)
    history_run: str | None = None
    layout: ParallelDims = None  # type: ignore[assignment]  (set in __post_init__ when not given)

    def __post_init__(self) -> None:
        """Type ``precision``, ``strategy`` and ``layout`` given as text or a dict (a decider's, a stored plan's),
        and check the layout against the devices.

        Raises:
            ValueError: a precision or distribution that is not one of the members, naming them; a layout whose
                degrees do not multiply to ``devices × num_nodes``.
        """
        self.precision = _member(Precision, self.precision, "precision")
        self.strategy = _member(Distribution, self.strategy, "strategy")
        world = self.devices * self.num_nodes
        if isinstance(self.layout, dict):
            self.layout = ParallelDims(**{k: int(self.layout[k]) for k in ("data", "tensor", "pipeline")
                                          if k in self.layout})
        elif self.layout is None:
            self.layout = ParallelDims.from_estimates(self.estimates.get("layout"), world)
        if self.layout.world_size != world:
            raise ValueError(f"layout {self.layout.name()} takes {self.layout.world_size} processes, but the plan "
                             f"has {self.devices} device(s) × {self.num_nodes} node(s) = {world}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values — plain text for the enums, so that a checkpoint holding them loads with
        ``weights_only=True``."""
        return {**asdict(self), "precision": str(self.precision), "strategy": str(self.strategy),
                "layout": self.layout.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Rebuild a plan from ``to_dict`` output (one stored before 0.4 names its resource strategy
        ``strategy_name``)."""
        values = dict(data)
        if "strategy_name" in values:
            values.setdefault("resource_strategy", values.pop("strategy_name"))
        values["decisions"] = [Decision(**d) for d in values.get("decisions", [])]
        return cls(**values)

    @property
    def strategy_name(self) -> str:
        """The old name of ``resource_strategy`` (a ``DeprecationWarning``; accepted for this release)."""
        import warnings

        warnings.warn("Plan.strategy_name is renamed Plan.resource_strategy", DeprecationWarning, stacklevel=2)
        return self.resource_strategy

    @property
    def tensor_parallel_size(self) -> int:
        """Devices one copy of the model is split over (``layout.tensor``)."""
        return self.layout.tensor

    @property
    def pipeline_parallel_size(self) -> int:
        """Pipeline stages one copy of the model is cut into (``layout.pipeline``)."""
        return self.layout.pipeline

    def explain(self) -> str:
        """A readable table of the decisions (``name  value  reason``) and the estimates behind them."""
        width = max((len(d.name) for d in self.decisions), default=4)
        vwidth = max((len(str(d.value)) for d in self.decisions), default=5)
        lines = [f"Resource plan ({self.resource_strategy})"]
        lines += [f"  {d.name:<{width}}  {str(d.value):<{vwidth}}  {d.reason}" for d in self.decisions]
        e = self.estimates
        if e:
            figures = []
            if "parameters" in e:
                figures.append(f"{_count(e['parameters'])} parameters")
            if "flops_per_sample" in e:
                figures.append(f"{_count(e['flops_per_sample'])} FLOPs/sample")
            if "state_bytes" in e:
                figures.append(f"training state {nbytes(e['state_bytes'])}")
            if e.get("estimated_seconds") is not None:
                source = e.get("estimate_source")
                figures.append(f"~{_duration(float(e['estimated_seconds']))} to train" + (
                    " (from FLOPs)" if source in (None, "FLOPs") else " (from the speed probe)" if source == "probe"
                    else f" (measured in {source})") + (
                    f", {float(e['estimated_overhead_seconds']):.2g} s of it beyond the training as in "
                    f"{e.get('overhead_run')}" if e.get("estimated_overhead_seconds") else "") + (
                    f", {float(e['estimated_probe_seconds']):.2g} s of it the speed probe"
                    if e.get("estimated_probe_seconds") else ""))
            probe = e.get("probe")
            if probe:
                figures.append(f"speed probe {float(probe['seconds']):.1f} s" if not probe.get("reused")
                               else "speed probe reused")
            if figures:
                lines.append("  estimates: " + ", ".join(figures))
        return "\n".join(lines)


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def _member(kind: type[TextEnum], value: Any, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(repr(m.value) for m in kind)}") from None
