"""The deciders of a resource plan: one small class per concern, composed by a resource strategy.

Each ``Decider`` looks at the ``PlanContext`` and the decisions made before it (in a
``PlanDraft``) and makes its own, each with a one-line reason. A choice the user fixed
(``precision=...``, ``devices=...``, ``strategy=...``) wins and is reported as such. The concerns, in the order
``DefaultStrategy`` decides them:

- ``devices``: accelerator, devices per node, nodes;
- ``precision``: the Lightning precision (measured by a speed probe where the device computes 16-bit natively);
- ``memory_format``: channels-last or contiguous weights for convolutional networks (measured);
- ``allocator``: whether a CPU training keeps freed memory in its process instead of faulting fresh pages in every
  step (measured);
- ``distribution``: Lightning's ``strategy`` — ``auto``, ``ddp``, ``fsdp2``, a DeepSpeed ZeRO stage;
- ``compression``: DDP's gradient compression;
- ``batching``: micro-batch and gradient accumulation;
- ``layout``: a data × tensor × pipeline layout, when the model fits no single device;
- ``training_length``: the epochs to train (enough optimizer steps for small data) and when to validate;
- ``data``: ``in-memory`` or ``sharded`` loading;
- ``optimizer_kernel``: the optimizer's kernel (reported: the algorithm chooses the fused one where it can);
- ``compile``: whether ``torch.compile`` runs (after the others: it weighs the expected training time);
- ``precision_switching``: whether a CPU training re-times its step in the other of bf16-mixed and fp32 now and
  then and goes on in the faster (where the probe found their losses in agreement);
- ``checkpoint_interval``: how often ``last.ckpt`` is written (from the measured cost of a write against an epoch);
- ``loader_workers``: data-loader worker processes and torch threads (from the CPU budget: cgroup quota and
  affinity; workers from the measured loading time against the step time).

The speed concerns read a ``SpeedProbe`` (``PlanContext.probe``): a few real training steps of the model in each
configuration, measured before planning (``twinkle_core.engine.probes``); without one they keep the safe default and
say why.

A plugin's resource strategy replaces or adjusts one of them (see ``DefaultStrategy.replacing``).
"""

from __future__ import annotations

import math
import os
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypedDict

from twinkle_core.errors import HyperparameterError
from twinkle_core.planning.estimate import ModelFacts, PlanningError
from twinkle_core.planning.hardware import Hardware, nbytes
from twinkle_core.planning.history import PastRun
from twinkle_core.planning.plan import Decision, Distribution, Precision
from twinkle_core.planning.probes import CLEARLY_FASTER, LOSS_TOLERANCE, SpeedProbe, milliseconds

SINGLE_DEVICE_PARAMS = 100_000_000
"""Below this many parameters a model trains on one device: communication would cost more than it saves."""

SHARDED_FRACTION = 0.5
"""Data larger than this share of the memory a run may use is read in shards instead of loaded whole."""


@dataclass
class PlanContext:
    """Everything a strategy may look at.

    Attributes:
        algorithm_name: the algorithm's registered name (or class name).
        task: the task.
        facts: model measurements (``twinkle_core.planning.measure``).
        data_bytes: the data's size on storage.
        train_samples: samples in the training split.
        batch_size: the requested micro-batch (the ``batch_size`` hyperparameter).
        effective_batch_size: the requested samples per optimizer step (default: ``batch_size`` × devices).
        max_epochs: epochs the user asked for (``None``: the plan decides, ``TrainingLengthDecider``).
        hardware: the machine.
        history: earlier finished runs of the same algorithm, data fingerprint and hardware (newest first), with
            what they measured (``PastRun``; records given as dicts, as before 0.3, are converted).
        overrides: choices the user fixed (``precision``, ``devices``, ``accelerator``, ``strategy``,
            ``num_workers``, ``accumulate_grad_batches``); a decider keeps them and says so.
        supports_mixed_precision: whether the algorithm trains safely in 16-bit.
        memory_limit_bytes: the memory the run may use per device (``memory_limit_bytes``), if capped.
        data_sharded: whether the data was prepared as streamed shards (``None``: not known yet).
        tokens_per_sample: tokens in one sample for token-id inputs (sequence models), else ``None``.
        splits_tensors: whether the algorithm supplies a tensor-parallel plan (``Algorithm.tensor_parallel_plan``).
        cuts_stages: whether the algorithm cuts its network into pipeline stages (``Algorithm.pipeline_stages``).
        max_steps: optimizer steps the user asked for (-1: no step limit).
        val_check_interval: how often the user asked to validate (training batches, or a fraction of an epoch),
            if they did.
        min_optimizer_steps: the steps a default-length run of this algorithm needs at least
            (``Algorithm.min_optimizer_steps``; ``None``: ``MIN_OPTIMIZER_STEPS``).
        probe: what a speed probe measured (``None``: no probe ran; ``probe_note`` says why).
        probe_note: why no probe ran (``probe=False``, several processes, a probe that failed), if none did.
        val_samples: samples in the validation split (0: not known), for the time estimate.
        optimizer_kernel: the optimizer kernel the algorithm uses for its parameters (``"fused"``, ``"foreach"``,
            ``"for-loop"``), if known.
        checkpoint_every_n_steps: the user's mid-epoch checkpoint interval in optimizer steps, if set.
        updates_per_batch: optimizer steps each batch makes in a row (``Algorithm.updates_per_batch``; 1: one).
    """

    algorithm_name: str
    task: str
    facts: ModelFacts
    data_bytes: int
    train_samples: int
    batch_size: int
    effective_batch_size: int | None
    max_epochs: int | None
    hardware: Hardware
    history: list[PastRun] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    supports_mixed_precision: bool = True
    memory_limit_bytes: int | None = None
    data_sharded: bool | None = None
    tokens_per_sample: int | None = None
    splits_tensors: bool = False
    cuts_stages: bool = False
    max_steps: int = -1
    val_check_interval: float | None = None
    min_optimizer_steps: int | None = None
    probe: SpeedProbe | None = None
    probe_note: str | None = None
    val_samples: int = 0
    optimizer_kernel: str | None = None
    checkpoint_every_n_steps: int | None = None
    updates_per_batch: int = 1

    def __post_init__(self) -> None:
        """Take past runs given as catalogue dicts (the form before 0.3) as ``PastRun``s."""
        self.history = [run if isinstance(run, PastRun) else PastRun.from_record(run) for run in self.history]

    @property
    def device_memory(self) -> int:
        """Memory of one device, or the run's cap when lower."""
        memory = self.hardware.device_memory_bytes
        return min(memory, self.memory_limit_bytes) if self.memory_limit_bytes else memory

    @property
    def host_memory(self) -> int:
        """Host memory, or the run's cap when lower."""
        memory = self.hardware.memory_bytes
        return min(memory, self.memory_limit_bytes) if self.memory_limit_bytes else memory


class PlanValues(TypedDict, total=False):
    """The values a draft decides, by name (``PlanDraft.values``): ``Plan``'s fields, as the deciders set them.

    A decider may also decide a name of its own; it is explained with the plan but not one of its fields.
    """

    accelerator: str
    devices: int
    num_nodes: int
    precision: Precision | str
    memory_format: str
    allocator: str
    compile: str
    precision_switching: str
    strategy: Distribution | str
    gradient_compression: str
    micro_batch_size: int
    accumulate_grad_batches: int
    layout: str
    max_epochs: int
    val_check_interval: int
    data_loading: str
    num_workers: int
    torch_threads: int
    checkpoint_every_n_epochs: int


@dataclass
class PlanDraft:
    """A plan being decided: each value with its reason, in the order decided.

    Attributes:
        context: what the plan is for.
        values: decided values by name.
        decisions: every decision with its reason (a later decision of the same name replaces the earlier).
    """

    context: PlanContext
    values: PlanValues = field(default_factory=lambda: PlanValues())
    decisions: list[Decision] = field(default_factory=list)
    layout: Any = None
    """The ``Layout`` a ``LayoutDecider`` chose, if any."""

    def decide(self, name: str, value: Any, reason: str) -> Any:
        """Record ``name = value`` for ``reason`` — unless the user fixed ``name``; returns the value kept."""
        fixed = self.context.overrides.get(name)
        if fixed is not None:
            value, reason = fixed, "set by the user"
        self.values[name] = value  # type: ignore[literal-required]  (a decider's own names are allowed)
        decision = Decision(name, value, reason)
        self.decisions = [d for d in self.decisions if d.name != name] + [decision]
        return value

    def __getitem__(self, name: str) -> Any:
        """A decided value."""
        return self.values[name]

    @property
    def world_size(self) -> int:
        """Processes taking part: devices × nodes."""
        return int(self.values.get("devices", 1)) * int(self.values.get("num_nodes", 1))

    @property
    def workers(self) -> int:
        """The old name of ``world_size`` (a ``DeprecationWarning``; accepted for this release)."""
        warnings.warn("PlanDraft.workers is renamed PlanDraft.world_size", DeprecationWarning, stacklevel=2)
        return self.world_size


class Decider(ABC):
    """Decides one concern of a plan (see the module docstring for the concerns)."""

    concern: ClassVar[str] = ""

    @abstractmethod
    def decide(self, draft: PlanDraft) -> None:
        """Make this concern's decisions in ``draft`` with ``PlanDraft.decide``."""


class DevicesDecider(Decider):
    """CUDA when present, else CPU; one device below 100M parameters, every device above."""

    concern = "devices"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``accelerator``, ``devices`` and ``num_nodes``."""
        c, hw = draft.context, draft.context.hardware
        draft.decide("accelerator", hw.accelerator,
                     f"{hw.devices}× {hw.device_name} available" if hw.accelerator != "cpu" else "no GPU found")
        if hw.launcher:  # the processes exist already: the plan must match them
            for name, value in (("devices", hw.processes_per_node), ("num_nodes", hw.nodes)):
                wanted = c.overrides.get(name)
                if wanted is not None and wanted != value:
                    raise PlanningError(f"{name}={wanted} was asked for, but {hw.launcher} started {value} "
                                        f"({'processes per node' if name == 'devices' else 'nodes'}); launch "
                                        f"with {wanted} or drop {name}")
            draft.decide("devices", hw.processes_per_node, f"{hw.launcher} started {hw.processes_per_node} "
                                                           "process(es) on each node")
            draft.decide("num_nodes", hw.nodes, f"{hw.launcher}: {hw.nodes} node(s)")
            return
        if hw.accelerator == "cpu":
            draft.decide("devices", 1, "CPU training runs as one process")
        elif c.facts.parameters < SINGLE_DEVICE_PARAMS:
            draft.decide("devices", 1, f"{human(c.facts.parameters)} parameters < {human(SINGLE_DEVICE_PARAMS)}: "
                                       "one device avoids communication")
        else:
            draft.decide("devices", hw.devices, f"{human(c.facts.parameters)} parameters: use every device")
        draft.decide("num_nodes", hw.nodes, f"{hw.nodes} machines" if hw.nodes > 1 else "one machine")


class PrecisionDecider(Decider):
    """16-bit mixed precision where the device computes it natively and it is measured to be clearly faster.

    On GPUs: bf16-mixed where the device has bf16, 16-mixed (with a gradient scaler) where it has only fp16 —
    unless a probe measured it slower or its losses apart from fp32's. On CPUs: bf16-mixed only where the CPU computes
    bf16 natively (``avx512_bf16``, ``amx_bf16``; Arm ``bf16``) *and* a probe of this model's training step found it
    at least ``CLEARLY_FASTER`` (1.1×) faster with losses within ``LOSS_TOLERANCE`` of fp32's; otherwise fp32.
    """

    concern = "precision"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``precision``."""
        draft.decide("precision", *self.choose(draft.context))

    @staticmethod
    def choose(c: PlanContext) -> tuple[str, str]:
        """The precision and its reason."""
        hw = c.hardware
        if not c.supports_mixed_precision:
            return "32-true", f"{c.algorithm_name} does not support mixed precision"
        if hw.accelerator == "cpu":
            if not hw.bf16:
                return "32-true", "this CPU has no native bf16 arithmetic (no avx512_bf16/amx_bf16): fp32"
            mixed, default = "bf16-mixed", "32-true"
        elif hw.bf16:
            mixed, default = "bf16-mixed", "bf16-mixed"
        elif hw.fp16:
            mixed, default = "16-mixed", "16-mixed"
        else:
            return "32-true", f"{hw.device_name} has no fast 16-bit arithmetic"
        probe = c.probe
        run = probe.run(mixed) if probe is not None else None
        if probe is None or run is None:
            why = c.probe_note or "not probed"
            if default == "32-true":
                return default, f"the CPU computes bf16 natively, but {why}: fp32 (pin precision='bf16-mixed' to use it)"
            native = "bf16 natively (no loss scaling needed)" if mixed == "bf16-mixed" else "fp16 (with a loss scaler)"
            return default, f"{hw.device_name} computes {native}; {why}"
        speed, gap = probe.speedup(run), probe.loss_gap(run)
        figures = (f"a training step took {milliseconds(run.seconds_per_step)} in {mixed} against "
                   f"{milliseconds(probe.baseline.seconds_per_step)} in fp32 ({speed:.2f}×), "
                   + (f"losses apart from fp32's by at most {gap:.1%} of its first" if math.isfinite(gap)
                      else "but its loss was not finite"))
        measured = probe.measured
        if gap > LOSS_TOLERANCE:
            return "32-true", f"{measured}: {figures} (more than {LOSS_TOLERANCE:.0%}): fp32"
        needed = CLEARLY_FASTER if default == "32-true" else 1.0  # a GPU keeps 16-bit (half the memory) unless slower
        if speed >= needed:
            return mixed, f"{measured}: {figures}"
        return "32-true", f"{measured}: {figures}; not {needed}× faster: fp32"


class MemoryFormatDecider(Decider):
    """Channels-last weights for a convolutional network where a probe found them clearly faster at the chosen
    precision (on some CPUs they are slower: only a measurement can choose); contiguous otherwise."""

    concern = "memory_format"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``memory_format``."""
        c, precision = draft.context, str(draft.values.get("precision", "32-true"))
        probe = c.probe
        last = probe.run(precision, "channels_last") if probe is not None else None
        plain = probe.run(precision, "contiguous") if probe is not None else None
        if probe is None or last is None or plain is None:
            draft.decide("memory_format", "contiguous", "channels-last not measured for this model at "
                                                        f"{precision}" if probe is not None else
                         f"{c.probe_note or 'not probed'}: torch's default layout")
            return
        speed = probe.speedup(last, plain)
        figures = (f"channels-last {milliseconds(last.seconds_per_step)} a step against "
                   f"{milliseconds(plain.seconds_per_step)} contiguous at {precision} ({speed:.2f}×)")
        if speed >= CLEARLY_FASTER and probe.agrees(last, plain):
            draft.decide("memory_format", "channels_last", f"{probe.measured}: {figures}")
        else:
            draft.decide("memory_format", "contiguous", f"{probe.measured}: {figures}; not {CLEARLY_FASTER}× faster")


ALLOCATOR_NOT_SLOWER = 0.95
"""The allocator's ``"retain"`` is kept unless the probe's fp32 step with it was slower than this share of the
step with the allocator as it was (a noise margin: keeping freed memory only removes the kernel's work)."""


class AllocatorDecider(Decider):
    """Whether a CPU training keeps the memory it frees (``"retain"``: glibc's ``malloc`` thresholds raised, see
    ``twinkle_core.engine.allocator``) or lets glibc give it back to the system (``"default"``).

    Retained unless the probe measured the fp32 step slower with it (below ``ALLOCATOR_NOT_SLOWER`` of the step with
    the allocator as it was). The probe's few steps on one batch understate the gain: glibc adapts its thresholds to
    them, while a training's validation, data and logging between steps keep making it give memory back and fault
    fresh pages in (the figures of a ResNet-18 fit: ``twinkle_core.engine.allocator``), so the probe guards against
    a loss rather than waits for a gain. The default without a measurement, on GPUs (a step's host memory is small
    there) and where the allocator is not glibc's."""

    concern = "allocator"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``allocator``."""
        c = draft.context
        probe = c.probe
        kept = probe.run("32-true", "contiguous", "retain") if probe is not None else None
        given = probe.run("32-true", "contiguous", "default") if probe is not None else None
        if probe is None or kept is None or given is None:
            why = (c.probe_note or "not probed") if probe is None else (
                "a GPU's step allocates little host memory" if c.hardware.accelerator != "cpu" else
                "this process's allocator is not glibc's")
            draft.decide("allocator", "default", f"{why}: the allocator as it is")
            return
        speed = probe.speedup(kept, given)
        faults = given.faults_per_step
        figures = (f"{probe.measured}: an fp32 step took {milliseconds(kept.seconds_per_step)} keeping freed memory "
                   f"in the process against {milliseconds(given.seconds_per_step)} with the allocator as it was "
                   f"({speed:.2f}×" + (f"; {faults:,.0f} page faults a step, {nbytes(int(faults) * 4096)} of fresh "
                                       "pages)" if faults is not None else ")"))
        if speed >= ALLOCATOR_NOT_SLOWER:
            draft.decide("allocator", "retain", f"{figures}: freed memory kept (no fresh pages faulted in each step; "
                                                "the process stays at its peak between steps)")
        else:
            draft.decide("allocator", "default", f"{figures}: slower, so the allocator as it is")


class OptimizerKernelDecider(Decider):
    """Reports the optimizer's kernel (the algorithm chooses it: ``Algorithm.optimizer_kernel``): torch's fused one
    where every trainable parameter is a plain floating-point tensor on the CPU or a CUDA device."""

    concern = "optimizer_kernel"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``optimizer_kernel`` (what the algorithm will use)."""
        kernel = draft.context.optimizer_kernel
        if kernel is None:
            return
        if kernel == "fused":
            draft.decide("optimizer_kernel", kernel, "every trainable parameter is a plain tensor: one fused pass per "
                                                     "tensor (AdamW over ResNet-18 on one CPU thread: 17.8 ms against "
                                                     "102.8 ms in torch's default loop, bench/optimizer_step.py)")
        else:
            draft.decide("optimizer_kernel", kernel, "sharded or non-float parameters: torch's default kernel")


COMPILE_WORTH_SECONDS = 1800.0
"""``torch.compile`` is considered only for trainings expected to take longer than this: compiling a network takes
1.5–3 minutes on a CPU (measured for ResNet-18 on this project's machine) and was slower per step there."""


class CompileDecider(Decider):
    """``torch.compile`` only where its gain, amortised over the planned steps, beats its compile time. Compiling
    takes minutes, so it is not considered for a training expected to take less than ``COMPILE_WORTH_SECONDS``
    (30 min); for a longer one the network runs eagerly unless compiling is pinned (``compile="default"`` or
    another ``torch.compile`` mode): no probe measures a compiled step yet, and a rule without a measurement would
    be wrong either way (compiled ResNet-18 was slower per step on this project's CPU)."""

    concern = "compile"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``compile`` (``"off"`` or a ``torch.compile`` mode)."""
        expected, _ = training_seconds(draft)
        if expected < COMPILE_WORTH_SECONDS:
            draft.decide("compile", "off", f"the training is expected to take ~{expected:.3g} s: compiling (minutes on "
                                           "a CPU) would not pay back")
            return
        draft.decide("compile", "off", f"the training is expected to take ~{expected / 60:.0f} min, but no compiled "
                                       "step was measured for this model: eager (pin compile='default' to compile)")


FIRST_TRIAL_AFTER = 10
"""Training steps in the plan's precision before the first trial of the other (the probe's measurement is the
freshest then, so the first trial comes soon; it is also the interval after each switch)."""

MAX_TRIAL_INTERVAL = 320
"""The longest interval between two trials, in training steps (each trial that keeps the current precision doubles
the interval up to this)."""

TRIAL_STEPS = 3
"""Steps timed in each precision for one comparison (their median counts)."""

SWITCH_GAIN = 1.05
"""How much faster the other precision's median step must be to switch to it (a margin against noise: below it the
run keeps what it has)."""


class PrecisionSwitchingDecider(Decider):
    """Whether a CPU training keeps measuring its precision: ``"on"`` where the CPU computes bf16 natively and the
    probe found bf16-mixed's losses within ``LOSS_TOLERANCE`` of fp32's, for a single-process run (the only kind
    probed) under one device or DDP, eager (a compiled network would recompile at each switch) — then the run starts
    in the plan's ``precision`` and switches to the other whenever a few steps of it are measured faster
    (``twinkle_core.engine.precision``: a CPU's relative speed of the two changes with the load on the machine, so
    one probe before the run is not the last word). ``"off"`` where ``precision`` is pinned, on GPUs (16-bit is
    steadily faster there), and without a probe. Pinned ``"on"`` where bf16-mixed cannot run is refused."""

    concern = "precision_switching"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``precision_switching``."""
        impossible = self.impossible(draft)
        if draft.context.overrides.get("precision_switching") == "on" and impossible:
            raise PlanningError(f"precision_switching='on' cannot apply: {impossible}; drop it (or set "
                                "precision_switching='off')")
        draft.decide("precision_switching", *self.choose(draft))

    @staticmethod
    def impossible(draft: PlanDraft) -> str | None:
        """Why the run could not switch at all (precision pinned, not a CPU with bf16 autocast, not one device or
        DDP, compiled), or ``None`` where it could."""
        c, v, hw = draft.context, draft.values, draft.context.hardware
        if c.overrides.get("precision") is not None:
            return f"precision={c.overrides['precision']} is set by the user"
        if hw.accelerator != "cpu":
            return f"on {hw.device_name} 16-bit arithmetic is steadily faster: the plan's precision holds"
        if not hw.bf16 or not c.supports_mixed_precision:
            return ("this CPU has no native bf16 arithmetic" if not hw.bf16
                    else f"{c.algorithm_name} does not support mixed precision") + ": fp32 throughout"
        if str(v.get("strategy", "auto")) not in ("auto", "ddp") or draft.layout is not None:
            return f"distribution {v.get('strategy')} brings its own precision handling"
        if str(v.get("compile", "off")) != "off":
            return "a compiled network would recompile at each switch"
        return None

    @classmethod
    def choose(cls, draft: PlanDraft) -> tuple[str, str]:
        """The value and its reason."""
        impossible = cls.impossible(draft)
        if impossible:
            return "off", impossible
        c = draft.context
        probe = c.probe
        run = probe.run("bf16-mixed") if probe is not None else None
        if probe is None or run is None:
            return "off", f"{c.probe_note or 'not probed'}: the plan's precision throughout"
        gap = probe.loss_gap(run)
        if not gap <= LOSS_TOLERANCE:
            return "off", f"bf16-mixed's losses were apart from fp32's ({gap:.1%} of its first): fp32 throughout"
        return "on", (f"{probe.measured}: bf16-mixed ran at {probe.speedup(run):.2f}× fp32's speed with agreeing "
                      f"losses; how the two compare on a CPU changes with the machine's load, so the run times "
                      f"{TRIAL_STEPS} steps in the other precision after {FIRST_TRIAL_AFTER} steps and then at "
                      f"doubling intervals (up to {MAX_TRIAL_INTERVAL}), and goes on in it when they are "
                      f"≥ {SWITCH_GAIN}× faster — no trial where the steps left could not pay back its cost at "
                      "the measured speeds (pin precision= to keep one)")


CHECKPOINT_SHARE = 0.02
"""Writing ``last.ckpt`` may take at most this share of the training time: where one write costs more than this
share of an epoch, the state is written every few epochs instead of after each."""

CHECKPOINT_MAX_INTERVAL_SECONDS = 300.0
"""However cheap an epoch, ``last.ckpt`` is written at least this often (in expected training seconds): a crash
loses at most this much training (an exact resume replays it)."""


class CheckpointIntervalDecider(Decider):
    """How often ``last.ckpt`` (the full state a run resumes from) is written, from the measured cost of one write
    (``SpeedProbe.checkpoint_seconds``) against the expected epoch: after every epoch, unless writing would take more
    than ``CHECKPOINT_SHARE`` of the training; then every k epochs, k as small as keeps the share (and at most
    ``CHECKPOINT_MAX_INTERVAL_SECONDS`` of training between two writes). The last epoch's state is always written,
    and an early stop, a budget or monitor stop and SIGTERM write their own; ``best.ckpt`` (weights only) is written
    whenever the monitored metric improves, whatever the interval. Without a measurement, with validation inside
    epochs or mid-epoch checkpoints: after every epoch."""

    concern = "checkpoint_interval"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``checkpoint_every_n_epochs``."""
        c = draft.context
        probe = c.probe
        _, epochs, _ = planned_length(draft)
        if probe is None or probe.checkpoint_seconds is None:
            why = c.probe_note or "not probed" if probe is None else "no checkpoint write was measured"
            draft.decide("checkpoint_every_n_epochs", 1, f"{why}: the state after every epoch")
            return
        if c.val_check_interval is not None or c.checkpoint_every_n_steps:
            draft.decide("checkpoint_every_n_epochs", 1, "validation or checkpoints within epochs: the state after "
                                                         "every epoch as well")
            return
        expected, _ = training_seconds(draft)
        write = probe.checkpoint_seconds
        size = nbytes(probe.checkpoint_bytes or 0)
        if epochs <= 1 or expected <= 0:
            draft.decide("checkpoint_every_n_epochs", 1, "one epoch: the state after it" if epochs == 1 else
                         "the training ends at max_steps, not after a count of epochs: the state after every epoch")
            return
        epoch = expected / epochs
        every = max(1, math.ceil(write / (CHECKPOINT_SHARE * epoch)))
        every = min(every, max(1, int(CHECKPOINT_MAX_INTERVAL_SECONDS // epoch)), epochs)
        figures = (f"{probe.measured}: writing the state ({size}) took {milliseconds(write)}, "
                   f"{write / epoch:.1%} of an epoch (~{epoch:.3g} s)")
        if every == 1:
            draft.decide("checkpoint_every_n_epochs", 1, f"{figures}: after every epoch")
        else:
            draft.decide("checkpoint_every_n_epochs", every,
                         f"{figures}: every {every} epochs keeps writing under {CHECKPOINT_SHARE:.0%} of the training "
                         f"(a crash loses at most {every - 1} epoch(s), ~{(every - 1) * epoch:.3g} s, which the exact "
                         "resume replays); the last epoch's state is always written")


def planned_length(draft: PlanDraft) -> tuple[int, int, int]:
    """``(optimizer steps per epoch, epochs, optimizer steps in all)`` of the draft: the decided ``max_epochs`` (for a
    strategy without ``TrainingLengthDecider``: the user's, else no limit with ``max_steps``, else
    ``DEFAULT_EPOCHS``; -1: no epoch limit), its steps cut at ``max_steps``."""
    c = draft.context
    per_epoch = steps_per_epoch(draft)
    decided = draft.values.get("max_epochs", c.max_epochs)
    epochs = int(decided if decided is not None else (-1 if c.max_steps > 0 else DEFAULT_EPOCHS))
    steps = per_epoch * epochs if epochs > 0 else c.max_steps
    if c.max_steps > 0:
        steps = min(steps, c.max_steps)
    return per_epoch, epochs, steps


def training_seconds(draft: PlanDraft) -> tuple[float, str]:
    """The training's expected duration and where the figure comes from: the speed probe's step at the chosen
    configuration (with the data's loading time when there are no loader workers, and validation as a third of a
    training step per sample), else an earlier run's seconds per sample, else the model's FLOPs at a conservative
    rate."""
    c, v = draft.context, draft.values
    replicas = max(draft.world_size // (draft.layout.model_parallel if draft.layout is not None else 1), 1)
    micro, accumulate = int(v.get("micro_batch_size", c.batch_size)), int(v.get("accumulate_grad_batches", 1))
    per_epoch, epochs, steps = planned_length(draft)
    samples = min(c.train_samples * c.updates_per_batch * epochs if epochs > 0 else math.inf,
                  steps * micro * replicas * accumulate)
    threads = int(v.get("torch_threads", 1))
    probe = c.probe
    if probe is not None:
        run = probe.run(str(v.get("precision", "32-true")), str(v.get("memory_format", "contiguous"))) \
            or probe.baseline
        # the median step (a machine's usual load included), not the fastest the decisions compare
        factor = probe.allocator_factor(str(v.get("allocator", probe.allocator)))
        per_sample = run.median_seconds_per_step * factor / max(probe.batch_size, 1) * probe.threads / max(threads, 1)
        load = (probe.load_seconds_per_batch or 0.0) / max(probe.batch_size, 1) if not v.get("num_workers") else 0.0
        validations = max(1, math.ceil(steps / per_epoch))
        seconds = samples / replicas * (per_sample + load) + validations * c.val_samples / replicas * per_sample / 3
        if probe.checkpoint_seconds and "checkpoint_every_n_epochs" in v:  # the writes of last.ckpt, once decided
            seconds += math.ceil(validations / max(int(v["checkpoint_every_n_epochs"]), 1)) * probe.checkpoint_seconds
        return seconds, "probe"
    if c.history and c.history[0].seconds_per_sample:
        return samples * c.history[0].seconds_per_sample, c.history[0].id
    if c.hardware.accelerator == "cpu":
        flops_per_second = CPU_FLOPS_PER_CORE * threads * draft.world_size
    else:
        flops_per_second = 1e14 * draft.world_size
    return samples * c.facts.flops_per_sample / flops_per_second, "FLOPs"


def past_overhead(context: PlanContext) -> tuple[float, str] | None:
    """What the newest earlier run of the same algorithm, data and hardware spent beyond its own plan's estimate of
    the training — the fixed costs the estimate from steps does not see: reading and preparing the data, building
    the model, planning, starting Lightning, the sanity check, logging, the curves and the record — and its id;
    ``None`` without such a run. The whole fit (``run_seconds``) less its probe (``probe_seconds``: the next run
    reuses the stored one) less ``estimated_train_seconds``; for a run recorded before ``run_seconds`` existed,
    Lightning's fit (``fit_seconds``) less the estimate."""
    for run in context.history:
        whole, fit = run.measured.get("run_seconds"), run.measured.get("fit_seconds")
        estimate = run.measured.get("estimated_train_seconds")
        if estimate and (whole or fit):
            spent = float(whole) - float(run.measured.get("probe_seconds") or 0.0) if whole else float(fit)
            return max(0.0, spent - float(estimate)), run.id
    return None


CPU_FLOPS_PER_CORE = 2e10
"""A conservative fp32 rate per core for a time estimate with neither a probe nor history."""


class DistributionDecider(Decider):
    """None on one device; DDP when the training state fits one device; FSDP2 when it fits sharded; beyond
    that DeepSpeed ZeRO-3 with CPU offload where DeepSpeed is installed and CUDA present, else FSDP2."""

    concern = "distribution"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``strategy``."""
        draft.decide("strategy", *self.choose(draft.context, draft.world_size))

    @staticmethod
    def choose(c: PlanContext, workers: int) -> tuple[str, str]:
        """The strategy and its reason."""
        state = c.facts.state_bytes
        if workers <= 1:
            return "auto", "one device: no distributed strategy"
        budget = 0.8 * c.device_memory
        if state < 0.5 * budget:
            return "ddp", f"training state {nbytes(state)} fits one device: replicate (DDP)"
        if state / workers < 0.5 * budget:
            return "fsdp2", f"training state {nbytes(state)} fits only sharded over {workers} devices: FSDP2"
        if c.hardware.deepspeed and c.hardware.accelerator == "cuda":
            return ("deepspeed_stage_3_offload",
                    f"training state {nbytes(state)} exceeds {workers} devices' memory: ZeRO-3 with CPU offload")
        why = "DeepSpeed needs CUDA" if c.hardware.deepspeed else "DeepSpeed is not installed (twinkle-core[deepspeed])"
        return "fsdp2", (f"training state {nbytes(state)} exceeds {workers} devices' memory even sharded; {why}, "
                         "so FSDP2 shards as far as it can")


class CompressionDecider(Decider):
    """PowerSGD for DDP across nodes (gradients cross the slowest links every step); none within one node."""

    concern = "compression"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``gradient_compression``."""
        c, strategy = draft.context, str(draft.values.get("strategy", "auto"))
        wanted = c.overrides.get("gradient_compression")
        if wanted not in (None, "none") and strategy != "ddp":
            raise PlanningError(f"gradient_compression={wanted!r} compresses DDP's all-reduce, but the plan's strategy "
                                f"is {strategy!r}; drop gradient_compression or set strategy='ddp' with 2+ devices")
        nodes = int(draft.values.get("num_nodes", 1))
        if strategy != "ddp":
            draft.decide("gradient_compression", "none", "no DDP all-reduce to compress")
        elif nodes > 1:
            draft.decide("gradient_compression", "powersgd", f"DDP across {nodes} nodes: PowerSGD sends rank-2 factors "
                                                             "of each gradient matrix instead of the matrix")
        else:
            draft.decide("gradient_compression", "none", "one node: gradients stay on its fast links")


class LayoutDecider(Decider):
    """For a training state larger than one device: the fastest data × tensor × pipeline layout that fits, from
    memory and time arithmetic (``twinkle_core.planning.layout``), recorded with the plan and explained factor by
    factor."""

    concern = "layout"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``layout``: the user's ``tensor_parallel_size`` / ``pipeline_parallel_size``, else (only when
        the state does not fit one device) the fastest layout that fits, with its micro-batch."""
        from twinkle_core.planning.layout import layout_for, plan_layout

        c = draft.context
        # the job's processes (a CPU job's devices are its processes) and the run's memory cap, when lower
        hw = replace(c.hardware, device_memory_bytes=c.device_memory,
                     devices=int(draft.values.get("devices", c.hardware.devices)),
                     nodes=int(draft.values.get("num_nodes", c.hardware.nodes)))
        mixed = str(draft.values.get("precision", "32-true")).endswith("mixed")
        global_batch = c.effective_batch_size or c.batch_size * draft.world_size
        micro = int(draft.values.get("micro_batch_size", 1))
        tensor, pipeline = c.overrides.get("tensor_parallel_size"), c.overrides.get("pipeline_parallel_size")
        fixed = c.overrides.get("strategy")
        if fixed == "pipeline" and pipeline is None:  # one stage per process (per tensor-parallel group)
            pipeline = max(draft.world_size // int(tensor or 1), 1)
        if tensor is not None or pipeline is not None:
            tensor, pipeline = int(tensor or 1), int(pipeline or 1)
            self._check(draft, tensor, pipeline)
            layout = layout_for(c.facts, hw, global_batch, micro, mixed, draft.world_size // (tensor * pipeline),
                                tensor, pipeline, c.splits_tensors)
            if c.overrides.get("tensor_parallel_size") is not None:
                layout.reasons[0] = f"tp {tensor}: set by the user (tensor_parallel_size)"
            if c.overrides.get("pipeline_parallel_size") is not None or fixed == "pipeline":
                source = ("pipeline_parallel_size" if c.overrides.get("pipeline_parallel_size") is not None
                          else "strategy 'pipeline': a stage per process")
                layout.reasons[1] = f"pp {pipeline}: set by the user ({source})"
        elif c.facts.state_bytes < 0.8 * hw.device_memory_bytes or draft.world_size <= 1:
            return
        else:
            fixed_micro = c.overrides.get("micro_batch_size")
            layout = plan_layout(c.facts, hw, global_batch, int(fixed_micro) if fixed_micro else None, mixed,
                                 c.splits_tensors, c.cuts_stages)
            if layout is None:
                draft.decide("layout", "none fits", f"no data × tensor × pipeline layout of {draft.world_size} "
                                                    f"devices fits {nbytes(hw.device_memory_bytes)} each; add devices")
                return
        draft.layout = layout
        split = layout.model_parallel
        if split > 1 and fixed != "pipeline":  # runs as planned: tensor parallel and stages in ModelParallelStrategy
            draft.decide("strategy", "fsdp2", f"{layout.describe()}: the model splits {layout.tensor} ways (tensor "
                                              f"parallel) into {layout.pipeline} pipeline "
                                              "stage(s) inside Lightning's ModelParallelStrategy, FSDP2 across its "
                                              f"{layout.data} replica(s)")
        elif layout.data > 1 and not str(draft.values.get("strategy", "")).startswith(("fsdp", "deepspeed")):
            draft.decide("strategy", "fsdp2", f"{layout.describe()}: FSDP2 shards the training state over the "
                                              f"{layout.data} replicas")
        resized = layout.micro_batch_size != micro
        if resized:
            micro = int(draft.decide("micro_batch_size", layout.micro_batch_size,
                                     f"the largest that fits {layout.name()}'s memory, up to a replica's share of "
                                     f"the effective batch {global_batch}"))
        if split > 1 or resized:
            _decide_accumulation(draft, micro, layout.data, split)
        draft.decide("memory", nbytes(layout.memory["total"]),
                     f"per device as laid out ({layout.name()}, micro-batch {layout.micro_batch_size}): "
                     + ", ".join(f"{part} {nbytes(size)}" for part, size in layout.memory.items() if part != "total")
                     + f"; {nbytes(layout.budget_bytes)} may be used")
        draft.decide("layout", layout.describe(), "; ".join(layout.reasons))

    @staticmethod
    def _check(draft: PlanDraft, tensor: int, pipeline: int) -> None:
        """Refuse a ``tensor_parallel_size`` or ``pipeline_parallel_size`` that cannot run, naming why.

        Raises:
            PlanningError: the algorithm supplies no tensor-parallel plan, the sizes do not divide the processes,
                or another strategy was asked for.
        """
        c = draft.context
        if tensor > 1 and not c.splits_tensors:
            raise PlanningError(f"tensor_parallel_size={tensor}: {c.algorithm_name} supplies no tensor-parallel plan "
                                "(Algorithm.tensor_parallel_plan); drop tensor_parallel_size (FSDP2 shards it instead)")
        asked = [f"{name}={size}" for name, size in (("tensor_parallel_size", tensor),
                                                    ("pipeline_parallel_size", pipeline)) if size > 1]
        names = " × ".join(asked) or f"tensor_parallel_size={tensor}"
        if draft.world_size % (tensor * pipeline):
            raise PlanningError(f"{names} does not divide the job's {draft.world_size} "
                                f"process(es); use devices (× num_nodes) that {tensor * pipeline} divides, or set "
                                "them to 1")
        fixed = c.overrides.get("strategy")
        if tensor * pipeline > 1 and fixed not in (None, "fsdp2", "pipeline"):
            raise PlanningError(f"{names} runs in Lightning's ModelParallelStrategy "
                                f"(strategy 'fsdp2'), not strategy={fixed!r}; drop one of them")


class BatchingDecider(Decider):
    """The requested batch halved until activations and state fit 80 % of device memory, with gradient
    accumulation keeping the requested effective batch; a finished run's micro-batch is reused.

    Under a ``memory_limit_bytes`` cap the micro-batch is found with real steps instead
    (``auto_batch_scaling``), so this estimate uses the device's own memory."""

    concern = "batching"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``micro_batch_size`` and ``accumulate_grad_batches``."""
        c, devices = draft.context, draft.world_size
        tensor = int(c.overrides.get("tensor_parallel_size") or 1) * int(c.overrides.get("pipeline_parallel_size") or 1)
        workers = max(devices // tensor, 1)  # data-parallel replicas: a model-parallel group reads one batch
        sharded = str(draft.values.get("strategy", "")).startswith(("fsdp", "deepspeed")) or tensor > 1
        state = c.facts.state_bytes / (devices if sharded else 1)
        budget = 0.8 * c.hardware.device_memory_bytes - state
        per_sample = max(c.facts.activation_bytes_per_sample * 2, 1)  # activations and their gradients
        micro = c.batch_size
        reason = f"requested batch_size {c.batch_size} fits device memory"
        fitted = next((run for run in c.history if run.micro_batch_size), None)
        if fitted is not None and fitted.micro_batch_size < micro:
            micro, reason = fitted.micro_batch_size, f"largest micro-batch that fitted in run {fitted.id}"
        while micro > 1 and micro * per_sample > budget:
            micro //= 2
            reason = f"batch_size {c.batch_size} would need {nbytes(c.batch_size * per_sample)} of activations"
        micro = int(draft.decide("micro_batch_size", micro, reason))
        _decide_accumulation(draft, micro, workers, tensor)
        total, parts = memory_breakdown(c, micro, devices if sharded else 1)
        draft.decide("memory", nbytes(total),
                     f"per device: {parts}; device memory {nbytes(c.hardware.device_memory_bytes)}")


def _decide_accumulation(draft: PlanDraft, micro: int, replicas: int, tensor: int = 1) -> None:
    """Decide ``accumulate_grad_batches``: the micro-batches each of ``replicas`` data-parallel replicas (a
    model-parallel group of ``tensor`` devices — tensor × pipeline — reads one batch) adds up to reach the requested
    effective batch."""
    c = draft.context
    effective = c.effective_batch_size or c.batch_size * replicas
    accumulate = max(1, math.ceil(effective / (micro * replicas)))
    draft.decide("accumulate_grad_batches", accumulate,
                 f"{micro} × {replicas} {'device(s)' if tensor == 1 else f'replica(s) of {tensor} devices'} × "
                 f"{accumulate} = effective batch {micro * replicas * accumulate}"
                 + (f" (requested {effective})" if micro * replicas * accumulate != effective else ""))


def memory_breakdown(c: PlanContext, micro_batch: int, shards: int = 1) -> tuple[int, str]:
    """One training step's estimated memory per device and what it is made of, in words.

    Weights, gradients and AdamW's two moments take 16 bytes per trainable parameter (fp32), a frozen
    parameter (LoRA's base) what it holds (4 in fp32, about 0.5 in NF4); activations and their gradients twice the bytes measured per sample (per token
    for token inputs) × the micro-batch. ``shards`` divides the parameter state (FSDP, DeepSpeed).
    """
    f = c.facts
    frozen, frozen_bytes = f.parameters - f.trainable, f.state_bytes - 16 * f.trainable
    state = f.state_bytes / shards
    activations = 2 * f.activation_bytes_per_sample * micro_batch
    share = f" / {shards} shards" if shards > 1 else ""
    parts = [f"weights, gradients and AdamW moments 16 B × {human(f.trainable)} trainable"
             + (f" + {human(frozen)} frozen weights {nbytes(frozen_bytes)}" if frozen else "") + f"{share} = {nbytes(state)}"]
    per = f"{nbytes(f.activation_bytes_per_sample)} per sample"
    if c.tokens_per_sample:
        per = (f"{nbytes(f.activation_bytes_per_sample / c.tokens_per_sample)} per token × "
               f"{c.tokens_per_sample} tokens")
    parts.append(f"activations and their gradients 2 × {per} × {micro_batch} = {nbytes(activations)}")
    return int(state + activations), "; ".join(parts)


DEFAULT_EPOCHS = 10
"""Epochs a run trains when the user sets neither ``max_epochs`` nor ``max_steps`` (and the data is not small)."""
MIN_OPTIMIZER_STEPS = 500
"""The optimizer steps below which a default run is lengthened. A small data set makes a handful of steps an epoch
(the breast-cancer table's 455 training rows in batches of 32: 15), and 10 epochs of them do not train a model from
scratch (the README's tabular fit asks for 30 epochs: 450 steps). An algorithm that needs more says so
(``Algorithm.min_optimizer_steps``: instruction tuning, 1,000)."""
MAX_AUTO_EPOCHS = 100
"""The most epochs the planner chooses on its own (a handful of samples is not trained for thousands)."""


def steps_per_epoch(draft: PlanDraft) -> int:
    """Optimizer steps in one epoch of the draft's training split: the samples over micro-batch × data-parallel
    replicas × accumulation; with ``updates_per_batch`` above 1, each rank's whole optimizer-step batches (the
    incomplete last one is left out) times the updates each makes.

    Raises:
        HyperparameterError: several updates per batch, and fewer samples per replica than one optimizer step takes.
    """
    c, v = draft.context, draft.values
    model_parallel = draft.layout.model_parallel if draft.layout is not None else 1
    replicas = max(draft.world_size // model_parallel, 1)
    micro, accumulate = int(v.get("micro_batch_size", c.batch_size)), int(v.get("accumulate_grad_batches", 1))
    if c.updates_per_batch > 1:
        per_replica, step = math.ceil(c.train_samples / replicas), max(micro * accumulate, 1)
        if per_replica < step:
            raise HyperparameterError(
                f"{c.algorithm_name} makes {c.updates_per_batch} updates per batch of {step} samples per replica "
                f"({micro} × {accumulate} accumulated), and the training split has {per_replica} per replica: give "
                "more data, or a smaller batch_size or effective_batch_size")
        return per_replica // step * c.updates_per_batch
    return max(1, math.ceil(c.train_samples / max(micro * replicas, 1) / max(accumulate, 1)))


class TrainingLengthDecider(Decider):
    """How long to train and when to validate. Without ``max_epochs`` or ``max_steps``: ``DEFAULT_EPOCHS``, or as
    many more as give the data ``MIN_OPTIMIZER_STEPS`` optimizer steps (the algorithm's own minimum where it states
    one; at most ``MAX_AUTO_EPOCHS``). With ``max_steps`` alone, the steps end the training (no epoch limit). A run
    that ends before its first epoch does validates at its last step, so it has a validation metric and a best
    checkpoint."""

    concern = "training_length"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``max_epochs`` and, when training ends inside the first epoch, ``val_check_interval``."""
        c = draft.context
        per_epoch = steps_per_epoch(draft)
        wanted = c.min_optimizer_steps or MIN_OPTIMIZER_STEPS
        whose = f"{c.algorithm_name} needs" if c.min_optimizer_steps else "the rule:"
        if c.max_epochs is not None:
            epochs = int(draft.decide("max_epochs", c.max_epochs, "set by the user"))
        elif c.max_steps > 0:
            epochs = int(draft.decide("max_epochs", -1, f"max_steps={c.max_steps} ends the training ({per_epoch} "
                                                        "optimizer steps an epoch)"))
        elif per_epoch * DEFAULT_EPOCHS >= wanted:
            epochs = int(draft.decide("max_epochs", DEFAULT_EPOCHS, f"{DEFAULT_EPOCHS} epochs × {per_epoch} optimizer "
                                                                    f"steps = {DEFAULT_EPOCHS * per_epoch} steps"))
        else:
            epochs = min(MAX_AUTO_EPOCHS, math.ceil(wanted / per_epoch))
            epochs = int(draft.decide(
                "max_epochs", epochs,
                f"{c.train_samples} training samples make {per_epoch} optimizer step(s) an epoch: {epochs} epochs give "
                f"{epochs * per_epoch} steps ({DEFAULT_EPOCHS} epochs would give {DEFAULT_EPOCHS * per_epoch}, too few "
                f"to learn; {whose} at least {wanted} steps, at most {MAX_AUTO_EPOCHS} epochs; pin max_epochs= to "
                "choose)"))
        if c.val_check_interval is not None:
            draft.decide("val_check_interval", c.val_check_interval, "set by the user")
        elif 0 < c.max_steps < per_epoch and (epochs == -1 or c.max_steps < epochs * per_epoch):
            batches = c.max_steps * int(draft.values.get("accumulate_grad_batches", 1))
            draft.decide("val_check_interval", batches,
                         f"max_steps={c.max_steps} ends training inside the first epoch ({per_epoch} steps): validate "
                         f"after training batch {batches}, so the run has a validation metric and a best checkpoint")


class DataLoadingDecider(Decider):
    """In memory, or read in shards when the data is larger than half the memory the run may use."""

    concern = "data"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``data_loading`` (what the engine prepared, when it is known)."""
        c = draft.context
        limit = min(c.hardware.memory_bytes, c.memory_limit_bytes) if c.memory_limit_bytes else c.hardware.memory_bytes
        wanted = self.needs_shards(c.data_bytes, c.hardware.memory_bytes, c.memory_limit_bytes)
        memory = "the memory limit" if c.memory_limit_bytes and c.memory_limit_bytes < c.hardware.memory_bytes \
            else "host memory"
        reason = f"data {nbytes(c.data_bytes)} vs {memory} {nbytes(limit)}"
        if wanted and c.data_sharded is False:
            draft.decide("data_loading", "in-memory", reason + f": {c.task}'s data processor cannot stream shards, "
                                                              "so it is loaded whole")
            return
        draft.decide("data_loading", "sharded" if wanted else "in-memory",
                     reason + (": stream it in shards" if wanted else ""))

    @staticmethod
    def needs_shards(data_bytes: int, host_memory: int, memory_limit_bytes: int | None = None) -> bool:
        """Whether data of ``data_bytes`` is larger than half the memory a run may use."""
        limit = min(host_memory, memory_limit_bytes) if memory_limit_bytes else host_memory
        return data_bytes > SHARDED_FRACTION * max(limit, 1)


LOAD_SHARE_FOR_WORKERS = 0.25
"""Loader workers are considered when reading a batch takes at least this share of a training step."""


class LoaderWorkersDecider(Decider):
    """Torch threads from the CPU budget (the cgroup's quota and the scheduler affinity, not only the core count;
    ``OMP_NUM_THREADS`` wins) shared between the device processes; data-loader workers from the measured ratio of a
    batch's loading time to its training step: where loading is a large share of the step and a core can be spared,
    the split of cores (threads for the step, workers for loading) expected to be fastest; none for in-memory data
    that loads in a small share of the step."""

    concern = "loader_workers"

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``num_workers`` and ``torch_threads``."""
        c = draft.context
        cores, devices = c.hardware.cpu_count, max(int(draft.values.get("devices", 1)), 1)
        budget = c.hardware.cpu_budget_reason
        env_threads = os.environ.get("OMP_NUM_THREADS")
        in_memory = draft.values.get("data_loading") == "in-memory"
        per_process = max(1, cores // devices)
        if draft.values.get("accelerator", c.hardware.accelerator) != "cpu":
            draft.decide("num_workers", min(8, max(per_process - 1, 0)), "cores per device minus one for the main "
                                                                         f"process ({budget})")
            threads = int(env_threads) if env_threads else per_process
            draft.decide("torch_threads", threads, "OMP_NUM_THREADS" if env_threads else
                         f"cores shared between device processes ({budget})")
            return
        threads = int(env_threads) if env_threads else per_process
        workers, why = self._workers(c, per_process, threads, in_memory, bool(env_threads))
        workers = int(draft.decide("num_workers", workers, why))
        if env_threads:
            draft.decide("torch_threads", threads, "OMP_NUM_THREADS")
        elif workers and per_process > 1 and c.overrides.get("num_workers") is None:
            draft.decide("torch_threads", max(1, per_process - workers),
                         f"{per_process} cores ({budget}) less {workers} for the loader workers")
        else:
            draft.decide("torch_threads", threads, f"the cores shared between the processes ({budget})")

    @staticmethod
    def _workers(c: PlanContext, cores: int, threads: int, in_memory: bool, pinned_threads: bool) -> tuple[int, str]:
        """Loader workers and why."""
        probe = c.probe
        load = probe.load_seconds_per_batch if probe is not None else None
        if probe is None or load is None:
            if in_memory:
                return 0, "data is in memory: worker processes would only add overhead"
            return min(2, max(c.hardware.cpu_count - 1, 0)), "sharded reads overlap compute"
        step = probe.baseline.seconds_per_step
        share = load / max(load + step, 1e-9)
        figures = f"reading a batch took {milliseconds(load)}, a training step {milliseconds(step)}"
        if share < LOAD_SHARE_FOR_WORKERS:
            return 0, f"{probe.measured}: {figures} ({share:.0%} of the two): loading in the training process"
        if cores < 2:
            return 0, f"{probe.measured}: {figures}, but one core: loading in the training process"
        # k workers leave cores - k threads for the step (which scales about with its threads); the loading is hidden
        # while the workers keep up
        alone = step + load
        best, best_time = 0, alone
        for k in range(1, min(cores - 1, 4) + 1):
            left = threads if pinned_threads else cores - k
            per_step = max(step * threads / max(left, 1), load / k)
            if per_step < best_time * 0.95:
                best, best_time = k, per_step
        if best == 0:
            return 0, f"{probe.measured}: {figures}: a core taken from the step would cost more than loading hides"
        return best, (f"{probe.measured}: {figures}: {best} worker(s) load while the step runs (~{milliseconds(best_time)} a "
                      f"step expected, against {milliseconds(alone)} loading in the training process)")


def human(n: float) -> str:
    """A count in k/M/B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(int(n))


def __getattr__(name: str) -> Any:
    """Old names kept for a release: ``WorkersDecider`` is ``LoaderWorkersDecider`` (a ``DeprecationWarning``)."""
    if name == "WorkersDecider":
        warnings.warn("twinkle_core.planning.deciders.WorkersDecider is renamed LoaderWorkersDecider", DeprecationWarning, stacklevel=2)
        return LoaderWorkersDecider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
