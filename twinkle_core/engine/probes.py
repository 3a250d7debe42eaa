"""Speed probes: a few real training steps of the run's model on one of its batches, in each configuration the speed
deciders choose between, before the plan is made (``twinkle_core.planning.probes`` holds the figures and the rules).

* **What runs.** Each configuration (fp32; bf16-mixed where the device computes bf16 natively, fp16 with a scaler on
  GPUs without it; channels-last for convolutional networks on images; on a CPU under glibc, each with freed memory
  kept in the process — ``twinkle_core.engine.allocator`` — after fp32 with the process's allocator as it is) gets
  its own copy of the model and optimizer, starting from the same weights, and trains on the same batch: one
  warm-up step, then steps in interleaved rounds (one step of each configuration per round, so a change of load
  hits them alike), until ``PROBE_STEPS`` rounds or the ``PROBE_SECONDS`` budget — the allocator's two groups one
  after the other (glibc's thresholds, once set, stay set). The steps are Lightning's (``batch_loss`` under the
  precision's autocast, backward, the algorithm's own optimizer with its fused kernel), each with the process's
  page faults counted; the original model is not touched. The losses the configurations compare are the steps'
  own, or the algorithm's ``agreement_loss`` where its loss depends on what it samples (reinforcement learning). The data's loading time is measured on three batches
  read and collated in this process; the cost of a checkpoint by writing the baseline's weights and optimizer state
  into the store twice with the run's own writer (``CheckpointIntervalDecider`` weighs it against an epoch).
* **What it costs.** Seconds: ResNet-18 on 32-px digits, four configurations, about 4 s on this project's 2-core
  CPU. A probe is not run when the copies would not fit in a fifth of the memory, for an algorithm that steps its own
  optimizers, or in a run of several processes (each would measure something else; pin the choices there).
* **Remembered.** The result is stored under ``<home>/probes/<key>.json``, keyed by the machine (device, CPU,
  threads, torch version), the model's signature (class, parameter names and shapes) and the batch's shape: the
  next run of the same kind reads it (``SpeedProbe.reused``) instead of measuring again. A disturbed measurement
  (``SpeedProbe.disturbed``: its two measurements of the fp32 step far apart) is measured once more; one still
  disturbed serves its run, with a note, and is not remembered.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import statistics
import time
import warnings
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from twinkle_core.algorithm import Algorithm, batch_size_of
from twinkle_core.engine import allocator
from twinkle_core.engine.checkpoints import AtomicCheckpointIO
from twinkle_core.planning.deciders import SINGLE_DEVICE_PARAMS
from twinkle_core.planning.estimate import describe_tensors, tensors_in
from twinkle_core.planning.hardware import Hardware, cpu_description
from twinkle_core.planning.probes import DISTURBED, ProbeRun, SpeedProbe, milliseconds
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.uris import filesystem, join

PROBE_STEPS = 12
"""Measured rounds at most (after one warm-up step per configuration)."""

MIN_PROBE_STEPS = 2
"""Measured rounds at least, whatever the budget."""

PROBE_SECONDS = 8.0
"""The measured rounds stop once they have taken this long (after ``MIN_PROBE_STEPS``)."""

MEMORY_SHARE = 0.2
"""A probe runs only when its copies of the training state fit in this share of the device's memory."""

LOAD_BATCHES = 3
"""Batches read to time the data's loading."""

MEASUREMENTS = 2
"""Times a probe measures at most: once more when its first measurement was disturbed (``SpeedProbe.disturbed``);
a result still disturbed is used by its run but not remembered."""


def candidates(algorithm: Algorithm, hardware: Hardware, example: Any) -> list[tuple[str, str, str]]:
    """The configurations to probe, baseline first: ``(precision, memory_format, allocator)`` triples. On a CPU
    under glibc's allocator every configuration runs with freed memory kept in the process (``"retain"``,
    ``twinkle_core.engine.allocator``), and the baseline once more with the allocator as it is, to measure that
    choice too."""
    kept = hardware.accelerator == "cpu" and allocator.tunable()
    mode = "retain" if kept else "default"
    runs = [("32-true", "contiguous", mode)]
    mixed = None
    if algorithm.supports_mixed_precision:
        if hardware.bf16:
            mixed = "bf16-mixed"
        elif hardware.accelerator == "cuda" and hardware.fp16:
            mixed = "16-mixed"
    if mixed:
        runs.append((mixed, "contiguous", mode))
    inputs = next(iter(tensors_in(example)), None)
    if inputs is not None and inputs.dim() == 4 and inputs.is_floating_point() and any(
            isinstance(m, torch.nn.Conv2d) for m in algorithm.modules()):
        runs.append((mixed or "32-true", "channels_last", mode))
    if kept:
        runs.append(("32-true", "contiguous", "default"))
    return runs


def probe_key(algorithm: Algorithm, hardware: Hardware, threads: int, batch: str,
              runs: list[tuple[str, str, str]], data: str = "") -> str:
    """The probe's identity: machine, torch, threads, the model's signature, the batch's shape, the configurations
    and how the data is read (``data``: the dataset's and its transform's classes)."""
    signature = hashlib.sha256()
    for name, parameter in algorithm.named_parameters():
        signature.update(f"{name}:{tuple(parameter.shape)}:{parameter.dtype}:{parameter.requires_grad};".encode())
    identity = {"hardware": hardware.key, "device": hardware.device_name, "cpu": cpu_description().name,
                "torch": torch.__version__, "threads": threads, "model": type(algorithm).__qualname__,
                "parameters": signature.hexdigest(), "batch": batch, "runs": runs, "data": data}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def cached_probe(home: str, key: str) -> SpeedProbe | None:
    """The stored probe of ``key`` under ``home``, if there is one that reads."""
    uri = join(home, "probes", f"{key}.json")
    fs, path = filesystem(uri)
    try:
        with fs.open(path, "r") as handle:
            probe = SpeedProbe.from_dict(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    probe.reused = uri
    return probe


PROBE_OFF_VALUES = ("0", "off", "false", "no")
"""Values of ``TWINKLE_PROBE`` that turn probing off."""


def probe_for_plan(settings: Any, hardware: Hardware, algorithm: Algorithm, train: Dataset, collate_fn: Any,
                   home: str | None) -> tuple[SpeedProbe | None, str | None]:
    """The probe a plan reads, or why there is none: probing is off (``probe=False``, ``TWINKLE_PROBE=0``), the run
    has several processes (each would measure something else: pin the choices), or every choice it informs is
    pinned. ``settings`` is the run's ``TrainerSettings``."""
    if not settings.probe:
        return None, "not probed (probe=False)"
    if os.environ.get("TWINKLE_PROBE", "").strip().lower() in PROBE_OFF_VALUES:
        return None, "not probed (TWINKLE_PROBE=0)"
    parameters = sum(p.numel() for p in algorithm.parameters())
    several = (hardware.launcher is not None or int(os.environ.get("WORLD_SIZE", "1")) > 1
               or settings.backend == "ray" or (settings.devices or 1) > 1 or (settings.num_nodes or 1) > 1
               or (hardware.accelerator != "cpu" and hardware.devices > 1 and settings.devices is None
                   and parameters >= SINGLE_DEVICE_PARAMS))  # the plan will use every device: one process each
    if several:
        return None, "not probed: a run of several processes (pin precision= to choose)"
    if settings.precision is not None and settings.memory_format is not None and settings.num_workers is not None:
        return None, "not probed: precision, memory_format and num_workers are pinned"
    env = os.environ.get("OMP_NUM_THREADS")
    threads = settings.torch_threads or (int(env) if env and env.isdigit() else hardware.cpu_count)
    result = probe_speed(algorithm, train, collate_fn, settings.batch_size, hardware, max(1, threads), home)
    return (result, None) if isinstance(result, SpeedProbe) else (None, f"not probed: {result}")


def probe_speed(algorithm: Algorithm, dataset: Dataset, collate_fn: Any, batch_size: int, hardware: Hardware,
                threads: int, home: str | None = None, *, steps: int = PROBE_STEPS,
                seconds: float = PROBE_SECONDS) -> SpeedProbe | str:
    """Probe ``algorithm`` on a batch of ``dataset`` (see the module docstring); the stored result when there is one.

    Returns:
        The probe, or why none was run (a sentence for the plan).
    """
    if not algorithm.automatic_optimization:
        return f"{type(algorithm).__name__} steps its own optimizers"
    started = time.perf_counter()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _random_state_kept(hardware.accelerator):  # the training draws as it would without the probe
            return _probe(algorithm, dataset, collate_fn, batch_size, hardware, threads, home, steps, seconds, started)
    except Exception as err:  # a probe that cannot run leaves the choices to the rules, never fails the training
        return f"the probe failed ({type(err).__name__}: {str(err)[:200]})"
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _random_state_kept(accelerator: str) -> Iterator[None]:
    """torch's (CPU and the current CUDA device's), NumPy's and Python's random states as they were on entry."""
    import random

    import numpy as np

    python, numpy_state = random.getstate(), np.random.get_state()
    devices = [torch.cuda.current_device()] if accelerator == "cuda" and torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy_state)


def _probe(algorithm: Algorithm, dataset: Dataset, collate_fn: Any, batch_size: int, hardware: Hardware,
           threads: int, home: str | None, steps: int, seconds: float, started: float) -> SpeedProbe | str:
    """``probe_speed``'s work, with the random states kept and the threads set."""
    batch, load = _first_batch(dataset, collate_fn, batch_size)
    if batch is None:
        return "the training split gave no batch"
    runs = candidates(algorithm, hardware, batch)
    described = describe_tensors(batch)
    reader = f"{type(dataset).__qualname__}/{type(getattr(dataset, 'transform', None)).__qualname__}"
    key = probe_key(algorithm, hardware, threads, described, runs, reader)
    if home is not None and (stored := cached_probe(home, key)) is not None:
        return stored
    state = sum(p.numel() * p.element_size() * (4 if p.requires_grad else 1) for p in algorithm.parameters())
    if state * len(runs) > MEMORY_SHARE * max(hardware.device_memory_bytes, 1):
        return f"{len(runs)} copies of the training state ({state * len(runs) / 2**30:.1f} GiB) would not fit " \
               f"in {MEMORY_SHARE:.0%} of the device's memory"
    scratch = join(home, "probes", f".{key}.ckpt") if home is not None else None
    notes: list[str] = []
    for attempt in range(MEASUREMENTS):
        measured, written = _measure(algorithm, batch, runs, hardware.accelerator, steps, seconds, scratch)
        probe = SpeedProbe(measured, described, batch_size_of(batch), threads, load, time.perf_counter() - started,
                           key, notes=notes, checkpoint_seconds=written[0] if written else None,
                           checkpoint_bytes=written[1] if written else None)
        if probe.twin is None or not probe.disturbed:
            break
        notes.append(f"measurement {attempt + 1} disturbed: the same fp32 step took "
                     f"{milliseconds(probe.baseline.seconds_per_step)} and "
                     f"{milliseconds(probe.twin.seconds_per_step)} "
                     f"(more than {DISTURBED}× apart: the machine's load changed while it measured)")
    if probe.disturbed:
        notes.append("not remembered: the next run of this kind measures again")
    elif home is not None:
        atomic_write_text(join(home, "probes", f"{key}.json"), json.dumps(probe.to_dict(), indent=2) + "\n")
    return probe


def _first_batch(dataset: Dataset, collate_fn: Any, batch_size: int) -> tuple[Any, float | None]:
    """The first of ``LOAD_BATCHES`` batches (a seeded random sample) and the median time to read one."""
    if isinstance(dataset, IterableDataset):
        loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate_fn, num_workers=0)
    else:
        sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
        loader = DataLoader(dataset, batch_size=min(batch_size, len(dataset)), sampler=sampler,  # type: ignore[arg-type]
                            collate_fn=collate_fn, num_workers=0, drop_last=False)
    first, times = None, []
    iterator = iter(loader)
    for _ in range(LOAD_BATCHES):
        start = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        times.append(time.perf_counter() - start)
        first = batch if first is None else first
    return first, (statistics.median(times) if times else None)


def _measure(algorithm: Algorithm, batch: Any, runs: list[tuple[str, str, str]], accelerator: str, steps: int,
             budget: float, checkpoint_uri: str | None = None
             ) -> tuple[list[ProbeRun], tuple[float, int] | None]:
    """Each configuration's steps, and (with ``checkpoint_uri``) the seconds and bytes of writing the baseline's
    training state there as a checkpoint is written (``_checkpoint_write``)."""
    device = torch.device("cuda" if accelerator == "cuda" else "cpu")
    workers = [_Copy(algorithm, *run, device, batch) for run in runs]
    # first the runs under the process's allocator as it is (glibc adapts its thresholds to what the process frees:
    # once they are set, it no longer does), then those with freed memory kept, each group in interleaved rounds
    groups = [[w for w in workers if w.allocator == "default"], [w for w in workers if w.allocator == "retain"]]
    try:
        for group in (g for g in groups if g):
            if group[0].allocator == "retain":
                allocator.set_allocator("retain")
            for worker in group:  # warm-up (kernels chosen, buffers allocated, the allocator's memory held)
                worker.step(0, timed=False)
            share, spent, rounds = budget * len(group) / len(workers), 0.0, 0
            while rounds < steps and (rounds < MIN_PROBE_STEPS or spent < share):
                for worker in group:
                    spent += worker.step(rounds + 1)
                rounds += 1
    finally:
        if groups[1]:
            allocator.set_allocator("default")  # the plan decides what the training gets (engine.run applies it)
    written = _checkpoint_write(workers[0], checkpoint_uri) if checkpoint_uri is not None else None
    return [ProbeRun(w.precision, w.memory_format, tuple(w.wall), tuple(w.cpu), tuple(w.losses), w.allocator,
                     tuple(w.faults)) for w in workers], written


CHECKPOINT_WRITES = 2
"""Times the probe writes the training state to measure a checkpoint's cost (the mean is kept: a disk's flush
varies from one write to the next)."""


def _checkpoint_write(worker: _Copy, uri: str) -> tuple[float, int]:
    """Seconds (the mean of ``CHECKPOINT_WRITES``) and bytes of writing ``worker``'s weights and optimizer state to
    ``uri`` with the run's own checkpoint writer (serialised, flushed, renamed); the file is removed after."""
    state = {"state_dict": worker.model.state_dict(), "optimizer_states": [worker.optimizer.state_dict()]}
    writer, times = AtomicCheckpointIO(), []
    fs, path = filesystem(uri)
    try:
        for _ in range(CHECKPOINT_WRITES):
            start = time.perf_counter()
            writer.save_checkpoint(state, uri)
            times.append(time.perf_counter() - start)
        size = int(fs.size(path))
    finally:
        with contextlib.suppress(OSError):
            fs.rm(path)
    return statistics.mean(times), size


class _Copy:
    """One configuration's model and optimizer."""

    def __init__(self, algorithm: Algorithm, precision: str, memory_format: str, allocator_mode: str,
                 device: torch.device, batch: Any) -> None:
        """A copy of ``algorithm`` (and its optimizer) in this configuration, on ``device``, with ``batch`` there."""
        self.precision, self.memory_format, self.device = precision, memory_format, device
        self.allocator = allocator_mode
        trainer, algorithm._trainer = algorithm._trainer, None  # type: ignore[attr-defined]
        try:
            self.model = copy.deepcopy(algorithm).to(device)
        finally:
            algorithm._trainer = trainer  # type: ignore[attr-defined]
        self.model.train()
        if memory_format == "channels_last":
            self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = self.model.build_optimizer([p for p in self.model.parameters() if p.requires_grad])
        self.scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
        self.batch = self.model.on_after_batch_transfer(self.model.transfer_batch_to_device(batch, device, 0), 0)
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.losses: list[float] = []
        self.faults: list[int] = []

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        if self.precision == "16-mixed":
            return torch.autocast(self.device.type, dtype=torch.float16)
        return contextlib.nullcontext()

    def _agreement_loss(self) -> torch.Tensor | None:
        """The algorithm's ``agreement_loss`` of the batch (without gradients, under this configuration's
        autocast), or ``None`` where the training loss is what the configurations compare."""
        with torch.no_grad(), self._autocast():
            return self.model.agreement_loss(self.batch)

    def step(self, index: int, timed: bool = True) -> float:
        """One training step; returns its wall seconds."""
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(index)  # the same dropout and augmentation draws in every configuration
            agreement = self._agreement_loss()
            _sync(self.device)
            faults, wall, cpu = allocator.page_faults(), time.perf_counter(), time.process_time()
            with self._autocast():
                loss = self.model.batch_loss(self.batch)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            _sync(self.device)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            faults = allocator.page_faults() - faults
        self.losses.append(float((loss if agreement is None else agreement).detach().float()))
        if timed:
            self.wall.append(wall)
            self.cpu.append(cpu)
            self.faults.append(faults)
        return wall


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["candidates", "cached_probe", "probe_for_plan", "probe_key", "probe_speed"]
