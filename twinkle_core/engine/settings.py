"""Trainer settings and the routing of hyperparameters to the algorithm, the data processor or the trainer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Annotated, Any, ClassVar, Literal, Mapping

from annotated_types import Ge

from twinkle_core.hyperparams import Hyperparameter, HyperparameterError, coerce, declared
from twinkle_core.planning.plan import Distribution, Precision
from twinkle_core.processes import DEFAULT_MAX_RESTARTS
from twinkle_core.types import NonNegativeInt, PositiveFloat, PositiveInt


@dataclass
class TrainerSettings:
    """What the trainer itself takes.

    Attributes:
        batch_size: samples per device per step (the plan may lower it to fit memory).
        effective_batch_size: samples per optimizer step; gradient accumulation makes up the difference.
        max_epochs: epochs to train (default: the plan's — 10, more where 10 epochs would give small data fewer
            than 500 optimizer steps, and no epoch limit when ``max_steps`` is set; see
            ``twinkle_core.planning.deciders.TrainingLengthDecider``).
        max_steps: optimizer steps to train (-1: no limit).
        seed: seeds everything (weights, split, shuffling, dropout).
        precision: force a Lightning precision (default: the plan's).
        accelerator: force ``"cpu"`` or ``"cuda"`` (default: the plan's).
        devices: force the number of devices per node (default: the plan's).
        num_nodes: the machines taking part (default: the launcher's, else one); each needs its processes
            started — ``twinkle launch`` prints the torchrun command per node.
        strategy: force the distribution: ``ddp``, ``fsdp2``, a DeepSpeed ZeRO stage, or ``pipeline`` (one stage
            of the network per process: ``pipeline_parallel_size`` = the processes) (default: the plan's).
        tensor_parallel_size: split the model over this many devices (its tensor-parallel degree; the rest
            replicate it, sharded with FSDP2); the algorithm must supply a plan (``Algorithm.tensor_parallel_plan``)
            (default: the plan's — above 1 only when the model fits no device otherwise).
        pipeline_parallel_size: cut the model into this many pipeline stages, one per device, trained with the
            1F1B schedule (interleaved where the model cuts into two stages per device); the algorithm must cut
            (``Algorithm.pipeline_stages``) (default: the plan's).
        num_workers: force data-loader workers (default: the plan's).
        torch_threads: force the torch threads per process (default: the plan's, from the CPU budget).
        memory_format: force ``"contiguous"`` or ``"channels_last"`` weights (default: the plan's).
        allocator: ``"retain"`` keeps the memory a CPU training frees in its process (glibc's ``malloc``
            thresholds raised: no fresh pages faulted in each step), ``"default"`` leaves the allocator as it is
            (default: the plan's — retained on a CPU under glibc unless the probe measured it slower; see
            ``twinkle_core.engine.allocator``).
        compile: ``torch.compile`` the network in this mode (``"default"``, ``"reduce-overhead"``,
            ``"max-autotune"``), or ``"off"`` (default: the plan's).
        precision_switching: ``"on"``: on a CPU that computes bf16 natively, re-time the training step in the
            other of bf16-mixed and fp32 now and then and go on in the faster; ``"off"``: keep the plan's precision
            (default: the plan's — on where the probe found bf16-mixed's losses in agreement with fp32's, unless
            ``precision`` is set; see ``twinkle_core.engine.precision``).
        probe: measure a few training steps in each configuration the planner chooses between before planning
            (precision, memory format, loader workers; seconds, remembered in the store). ``False`` skips it (as
            does the environment variable ``TWINKLE_PROBE=0``): the choices then follow the rules without
            measurements.
        gradient_clip_val: clip gradients to this norm.
        checkpoint_every_n_steps: also checkpoint ``last.ckpt`` every N optimizer steps (mid-epoch).
        checkpoint_every_n_epochs: write ``last.ckpt`` after every N epochs (and always after the last) (default: the
            plan's — every epoch unless the probe measured writing it to cost more than 2 % of the training; see
            ``twinkle_core.planning.deciders.CheckpointIntervalDecider``).
        early_stopping_patience: stop after this many validations without improvement.
        progress_bar: show Lightning's progress bar.
        val_check_interval: validate every N training batches (or a fraction of an epoch) (default: once an
            epoch, and at the last step of a run that ``max_steps`` ends inside its first epoch).
        auto_batch_scaling: find the largest micro-batch that runs (real steps) and keep the effective batch
            with gradient accumulation; on out-of-memory, retry from the last checkpoint with half the
            micro-batch and twice the accumulation.
        gradient_checkpointing: recompute activations in backward (algorithms that support it).
        memory_limit_bytes: cap the memory a run may use (CUDA: a per-process fraction; CPU: the planner's
            estimate per step, enforced before each step).
        gradient_compression: DDP's gradient all-reduce — ``"none"``, ``"powersgd"``, ``"bf16"``, ``"fp16"``
            (default: the plan's — PowerSGD across nodes); see ``twinkle_core.engine.compression``.
        backend: ``"local"`` (this machine's processes) or ``"ray"`` (Ray Train workers, the
            ``twinkle-core[ray]`` extra; default when ``RAY_ADDRESS`` names a cluster).
        ray_workers: Ray Train workers (``backend="ray"``; default 2). Its old name ``workers`` is accepted for
            this release, with a ``DeprecationWarning``.
        max_restarts: restarts from the last checkpoint when a process of a Ray job dies (Ray's
            ``FailureConfig``); ``twinkle train --max-restarts`` and ``twinkle launch`` take the same.
        report_to: experiment trackers the run reports to (``"mlflow"``, ``"tensorboard"``, ``"wandb"``, a
            plugin's; ``twinkle trackers list``), each configured by its own environment variables; see
            ``twinkle_core.tracking``. A comma-separated text is accepted; ``"none"``: none.
    """

    batch_size: PositiveInt = 32
    effective_batch_size: PositiveInt | None = None
    max_epochs: Annotated[int, Ge(-1)] | None = None
    max_steps: Annotated[int, Ge(-1)] = -1
    seed: NonNegativeInt = 0
    precision: Precision | None = None
    accelerator: Literal["cpu", "cuda", "gpu", "mps"] | None = None
    devices: PositiveInt | None = None
    num_nodes: PositiveInt | None = None
    strategy: Distribution | None = None
    tensor_parallel_size: PositiveInt | None = None
    pipeline_parallel_size: PositiveInt | None = None
    num_workers: NonNegativeInt | None = None
    torch_threads: PositiveInt | None = None
    memory_format: Literal["contiguous", "channels_last"] | None = None
    allocator: Literal["default", "retain"] | None = None
    compile: Literal["off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = None
    precision_switching: Literal["off", "on"] | None = None
    probe: bool = True
    gradient_clip_val: PositiveFloat | None = None
    checkpoint_every_n_steps: PositiveInt | None = None
    checkpoint_every_n_epochs: PositiveInt | None = None
    early_stopping_patience: PositiveInt | None = None
    progress_bar: bool = True
    val_check_interval: PositiveFloat | None = None
    auto_batch_scaling: bool = False
    gradient_checkpointing: bool = False
    memory_limit_bytes: PositiveInt | None = None
    gradient_compression: Literal["none", "powersgd", "bf16", "fp16", "1bit-adam"] | None = None
    backend: Literal["local", "ray"] | None = None
    ray_workers: PositiveInt | None = None
    max_restarts: NonNegativeInt = DEFAULT_MAX_RESTARTS
    report_to: list[str] | None = None

    RENAMED: ClassVar[dict[str, str]] = {"workers": "ray_workers"}
    """Old names of settings (old → new), accepted for one release with a ``DeprecationWarning``."""

    def __post_init__(self) -> None:
        """Refuse limits that would train nothing or forever.

        Raises:
            HyperparameterError: ``max_epochs=0``, ``max_steps=0``, or no limit at all (``max_epochs=-1``
                needs ``max_steps``).
        """
        if self.report_to is not None:  # every name registered, its library installed: before any run exists
            from twinkle_core.tracking import check_report_to

            self.report_to = check_report_to(self.report_to)
        if self.gradient_compression == "1bit-adam":
            raise HyperparameterError(
                "gradient_compression='1bit-adam': DeepSpeed removed 1-bit Adam (0.19.8 has no OnebitAdam, 0/1 Adam or "
                "1-bit LAMB). Its job — fewer bytes across nodes — is done today by DDP communication hooks: use "
                "'powersgd' (rank-2 factors, with error feedback) or 'bf16'/'fp16' (half the bytes)")
        if self.max_epochs == 0:
            raise HyperparameterError("max_epochs=0 trains nothing: pass max_epochs >= 1 (or -1 with max_steps)")
        if self.max_steps == 0:
            raise HyperparameterError("max_steps=0 trains nothing: pass max_steps >= 1 (or -1 for no step limit)")
        if self.max_epochs == -1 and self.max_steps == -1:
            raise HyperparameterError("max_epochs=-1 (no epoch limit) would train forever without max_steps: "
                                      "pass max_steps=N too, or max_epochs >= 1")

    @classmethod
    def parameters(cls) -> dict[str, Hyperparameter]:
        """Each setting as a declared hyperparameter (owner ``trainer``)."""
        return declared(cls.__init__, "trainer")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values — plain text for the enums (``precision``, ``strategy``), so that a checkpoint
        holding them loads with ``weights_only=True``."""
        return {key: str(value) if isinstance(value, Enum) else value for key, value in asdict(self).items()}

    def overrides(self) -> dict[str, Any]:
        """Choices that override the resource plan (those the user set)."""
        return {
            "precision": self.precision,
            "accelerator": self.accelerator,
            "devices": self.devices,
            "num_nodes": self.num_nodes,
            "strategy": self.strategy,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "num_workers": self.num_workers,
            "torch_threads": self.torch_threads,
            "memory_format": self.memory_format,
            "allocator": self.allocator,
            "compile": self.compile,
            "precision_switching": self.precision_switching,
            "checkpoint_every_n_epochs": self.checkpoint_every_n_epochs,
            "gradient_compression": self.gradient_compression,
        }


@dataclass
class Routed:
    """Hyperparameters split by owner: the algorithm's (incl. optimizer), the processor's, the trainer's."""

    algorithm: dict[str, Any]
    data: dict[str, Any]
    trainer: TrainerSettings


def check_names(
    values: Mapping[str, Any],
    algorithm_params: Mapping[str, Hyperparameter],
    data_params: Mapping[str, Hyperparameter],
    owner_names: tuple[str, str] = ("algorithm", "data processor"),
) -> None:
    """Refuse any name that neither the algorithm, the data processor nor the trainer declares.

    Raises:
        HyperparameterError: the unknown names, with every valid name by owner.
    """
    trainer_params = TrainerSettings.parameters()
    unknown = sorted(k for k in values if k not in algorithm_params and k not in data_params and k not in trainer_params)
    if unknown:
        raise HyperparameterError(
            f"unknown hyperparameter {', '.join(repr(u) for u in unknown)}. Valid ones — "
            f"{owner_names[0]}: {', '.join(sorted(algorithm_params)) or 'none'}; "
            f"{owner_names[1]}: {', '.join(sorted(data_params)) or 'none'}; "
            f"trainer: {', '.join(sorted(trainer_params))}"
        )


def trainer_settings(
    values: Mapping[str, Any], algorithm_params: Mapping[str, Hyperparameter], data_params: Mapping[str, Hyperparameter]
) -> TrainerSettings:
    """The trainer's own values (those no algorithm or processor declares), typed.

    Raises:
        HyperparameterError: a badly typed value, naming it.
    """
    trainer_params = TrainerSettings.parameters()
    return TrainerSettings(**{k: coerce(trainer_params[k], v) for k, v in values.items()
                              if k in trainer_params and k not in algorithm_params and k not in data_params})


def route(
    values: Mapping[str, Any],
    algorithm_params: Mapping[str, Hyperparameter],
    data_params: Mapping[str, Hyperparameter],
    owner_names: tuple[str, str] = ("algorithm", "data processor"),
    trainer: TrainerSettings | None = None,
) -> Routed:
    """Send each value to whoever declares it (algorithm first, then data processor, then trainer), typed once.

    ``trainer``: the trainer's settings when already typed (``Trainer`` types them when it is created).

    Raises:
        HyperparameterError: an unknown name (listing every valid name by owner) or a badly typed value.
    """
    check_names(values, algorithm_params, data_params, owner_names)
    algorithm, data = {}, {}
    for key, value in values.items():
        if key in algorithm_params:
            algorithm[key] = coerce(algorithm_params[key], value)
        elif key in data_params:
            data[key] = coerce(data_params[key], value)
    return Routed(algorithm, data, trainer or trainer_settings(values, algorithm_params, data_params))
