"""Utilisation, measured: throughput, achieved FLOP/s, model-FLOPs utilisation (MFU) and time spent waiting for data.

``Utilisation`` (a Lightning callback) times each training step from ``on_train_batch_start`` to
``on_train_batch_end`` (compute, including the backward and the optimizer step) and the gap before the next
step starts (fetching the batch from the loader, mostly: the data wait). At the end of training
``Utilisation.figures`` turns that into:

* ``samples_per_second`` (per process, and ``job_samples_per_second`` for the whole job) and, for integer-id
  inputs, ``tokens_per_second``;
* ``achieved_flops_per_second``: the model's measured FLOPs per sample (forward + backward, from
  ``torch.utils.flop_counter`` at planning) × samples per second, per device;
* ``mfu``: that over the device's peak *in the run's precision*, as torchtitan's MFU — a table of datasheet dense
  peaks for known GPUs; on a CPU a 1024² matmul in the run's compute type (bf16 for a bf16-mixed run) with the run's
  threads (``peak_source`` says which). A CPU's peak is measured once per machine (the best of ``PEAK_TRIALS``
  timings, remembered in the store: ``<home>/probes/peak-<key>.json``, keyed by the CPU, torch, the threads and the
  type) and checked again during the run (``PEAK_CHECK_SECONDS`` each, at most ``PEAK_CHECK_SHARE`` of the
  training): up to ``PEAK_CHECKS`` times as training starts, then now and then between steps. A run with at least
  ``PEAK_CHECKS`` checks divides by their best: the peak under the conditions it trained in, measured robustly (on
  this project's shared 2-core VM, where five runs of the same fit differ in speed by 14 to 28 %, their largest
  MFU over their smallest came 4 to 7 points nearer 1 than over the remembered peak); a shorter run divides by the
  remembered peak. A run that may switch between bf16-mixed and fp32 (``twinkle_core.engine.precision``) divides by bf16's peak, the higher one of
  the precisions it may compute in — how many of its steps a run spends in each is decided by noisy timings, and a
  peak weighted by them put five runs of the same LoRA fit between 0.34 and 0.53. It is never above 1: an
  achieved rate above the run's checks divides by the remembered peak (measured again where even that is below
  it), and failing that the MFU is not given (``None``, with the reason in ``peak_source``);
* ``data_wait_fraction``: the share of step time spent between steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

import lightning as L
import torch

from twinkle_core.algorithm import batch_size_of
from twinkle_core.planning.hardware import GPU_PEAK_TFLOPS, cpu_description, device_peak_table
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.uris import filesystem, join

_CPU_PEAK: dict[tuple[int, torch.dtype], float] = {}

PEAK_TRIALS = 5
"""Timings of the CPU peak's matmul; the best counts (another process's load only ever makes one slower)."""

PEAK_SIZE = 1024
"""The side of the CPU peak's square matmul (large enough for the kernels' full speed, small enough for 0.1 s)."""


PEAK_CHECK_SECONDS = 0.02
"""How long one in-run check of a CPU's peak times the peak's matmul."""

PEAK_CHECK_SHARE = 0.01
"""The most of a run's training that its checks may take: of the planned training for the checks as it starts, of
the step time so far for those between steps."""

PEAK_CHECKS = 3
"""The most checks of a CPU's peak as training starts, and the fewest whose best the MFU divides by."""


def matmul_operands(dtype: torch.dtype, size: int = PEAK_SIZE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two random ``size``² matrices in ``dtype`` and their product (the output the timings write into, and a
    warm-up), drawn from a generator of their own (a run's random draws stay its own)."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(dtype) for _ in range(2))
    return a, b, a @ b


def matmul_rate(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, seconds: float) -> float:
    """FLOP/s of ``torch.matmul(a, b, out=out)`` (square, ``a.shape[0]`` on a side) repeated for ``seconds``."""
    size = a.shape[0]
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.matmul(a, b, out=out)
        runs += 1
    return 2 * size**3 * runs / (time.perf_counter() - start)


def cpu_peak_flops(threads: int, dtype: torch.dtype = torch.float32, size: int = PEAK_SIZE,
                   seconds: float = 0.05) -> float:
    """FLOP/s of a ``size``² matmul in ``dtype`` on this machine with ``threads`` torch threads: the best of
    ``PEAK_TRIALS`` trials of ``seconds`` each (measured once per process and type), into one preallocated output
    (what the allocator does — fresh pages faulted in under glibc's defaults — is not the arithmetic's peak)."""
    if (threads, dtype) in _CPU_PEAK:
        return _CPU_PEAK[threads, dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    best = 0.0
    try:
        operands = matmul_operands(dtype, size)
        for _ in range(PEAK_TRIALS):
            best = max(best, matmul_rate(*operands, seconds))
    finally:
        torch.set_num_threads(before)
    _CPU_PEAK[threads, dtype] = best
    return best


def remembered_cpu_peak(home: str | None, threads: int, dtype: torch.dtype,
                        at_least: float = 0.0) -> tuple[float, bool]:
    """``cpu_peak_flops(threads, dtype)`` as measured on this machine the first time (read from ``home``'s
    ``probes/peak-<key>.json``, keyed by the CPU, torch, ``threads``, ``dtype`` and the matmul's size), measured and
    stored there when it is not yet; with no ``home``, measured. A stored figure below ``at_least`` (a run achieved
    more: the first measurement was disturbed) is measured again, and the higher of the two kept. Returns the figure
    and whether it was read."""
    if home is None:
        return cpu_peak_flops(threads, dtype), False
    identity = {"cpu": cpu_description().name, "torch": torch.__version__, "threads": threads, "dtype": str(dtype),
                "size": PEAK_SIZE, "trials": PEAK_TRIALS}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    uri = join(home, "probes", f"peak-{key}.json")
    fs, path = filesystem(uri)
    stored = 0.0
    try:
        with fs.open(path, "r") as handle:
            stored = float(json.load(handle)["flops_per_second"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    stored = stored if stored > 0 and math.isfinite(stored) else 0.0
    if stored >= at_least and stored > 0:
        return stored, True
    peak = max(cpu_peak_flops(threads, dtype), stored)
    atomic_write_text(uri, json.dumps({**identity, "flops_per_second": peak}, indent=2) + "\n")
    return peak, False


def device_peak(accelerator: str, device_name: str, precision: str, threads: int,
                home: str | None = None, at_least: float = 0.0) -> tuple[float | None, str]:
    """The peak FLOP/s of one device for ``precision`` and where the figure comes from (on a CPU with ``home``: the
    figure remembered there, ``remembered_cpu_peak``, measured again when below ``at_least``)."""
    if accelerator == "cpu":
        peak, earlier = remembered_cpu_peak(home, threads, compute_type(precision), at_least)
        return peak, f"measured{' earlier' if earlier else ''}: {_matmul(precision, threads)}, best of {PEAK_TRIALS}"
    bits = "16" if precision.startswith(("16", "bf16")) else "32"
    peak = device_peak_table(device_name, bits)
    if peak is None:
        return None, f"no peak known for {device_name}"
    model = next(m for m in GPU_PEAK_TFLOPS if m in device_name)
    return peak, f"datasheet: {model} dense {'bf16/fp16' if bits == '16' else 'TF32'}"


class Utilisation(L.Callback):
    """Times compute and the waits between training steps, and on a CPU checks the peak (see the module
    docstring)."""

    def __init__(self, peak_precision: str | None = None, planned_seconds: float = 0.0) -> None:
        """Start with nothing measured. ``peak_precision``: on a CPU run, the precision whose peak its MFU divides by
        (the plan's; ``"bf16-mixed"`` for a run that may switch to it), checked during the run; ``None``: no
        checks (a GPU's peak is its datasheet's). ``planned_seconds``: the plan's estimate of the training, of
        which the checks as training starts may take ``PEAK_CHECK_SHARE``."""
        self.compute_seconds = 0.0
        self.wait_seconds = 0.0
        self.samples = 0
        self.steps = 0
        self.fit_seconds = 0.0
        self.peak_precision = peak_precision
        self.planned_seconds = planned_seconds
        self.peak_checks: list[float] = []  # the checks' FLOP/s
        self.check_seconds = 0.0  # spent on checks between steps
        self._operands: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._start: float | None = None
        self._end: float | None = None
        self._fit_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Training starts: up to ``PEAK_CHECKS`` checks of the peak (a CPU run), as many as ``PEAK_CHECK_SHARE``
        of the planned training allows (none in a run planned under 2 s: its MFU divides by the remembered
        peak)."""
        while self.peak_precision is not None and len(self.peak_checks) < PEAK_CHECKS and \
                self.check_seconds + PEAK_CHECK_SECONDS <= PEAK_CHECK_SHARE * self.planned_seconds:
            self.check_peak()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's fit starts (its wall time is what the plan's estimate is compared with)."""
        self._fit_start = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's fit ends: add its wall time (an out-of-memory retry adds a second fit)."""
        if self._fit_start is not None:
            self.fit_seconds += time.perf_counter() - self._fit_start
            self._fit_start = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The first fetch of an epoch (a loader's start-up) is not counted as a wait between steps."""
        self._end = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        """A step starts: the time since the last one ended was spent getting this batch."""
        now = time.perf_counter()
        if self._end is not None:
            self.wait_seconds += now - self._end
        self._start = now

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Any, batch: Any,
                           idx: int) -> None:
        """A step ends."""
        now = time.perf_counter()
        if self._start is not None:
            self.compute_seconds += now - self._start
            self.samples += batch_size_of(batch)
            self.steps += 1
        if self.peak_precision is not None and self.check_seconds + PEAK_CHECK_SECONDS <= \
                PEAK_CHECK_SHARE * self.compute_seconds:
            self.check_peak()
            now = time.perf_counter()  # the check is neither compute nor a wait for data
        self._end = now

    def check_peak(self) -> float:
        """Time the peak's matmul for ``PEAK_CHECK_SECONDS`` in ``peak_precision``'s compute type with the run's
        threads now; keep and return its FLOP/s (the first check builds its operands and warms up)."""
        started = time.perf_counter()
        if self._operands is None:
            self._operands = matmul_operands(compute_type(str(self.peak_precision)))
        rate = matmul_rate(*self._operands, PEAK_CHECK_SECONDS)
        self.peak_checks.append(rate)
        self.check_seconds += time.perf_counter() - started
        return rate

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Validation between steps is not a data wait."""
        self._end = None

    def figures(self, flops_per_sample: float, processes: int, accelerator: str, device_name: str, precision: str,
                threads: int, tokens_per_sample: int | None = None, model_parallel: int = 1,
                home: str | None = None) -> dict[str, Any]:
        """The utilisation figures (per device unless named ``job_``), JSON-ready. ``precision``: the one whose
        peak the MFU divides by (``peak_precision`` where the run checked it). ``model_parallel``: the
        processes that hold one copy of the model between them (tensor × pipeline parallel), which all see the same
        samples: each does its share of every sample's work, and the job's rate counts each sample once. ``home``:
        the store where a CPU's peak is remembered (``remembered_cpu_peak``; only the process that records the run
        passes it)."""
        busy = self.compute_seconds + self.wait_seconds
        if not self.samples or busy <= 0:
            return {}
        rate = self.samples / busy / max(model_parallel, 1)
        achieved = flops_per_sample * rate
        precision = self.peak_precision or precision
        checks = self.peak_checks if accelerator == "cpu" else []
        if len(checks) >= PEAK_CHECKS and achieved <= max(checks):
            peak, source = max(checks), (f"measured during the run: {_matmul(precision, threads)}, best of "
                                         f"{len(checks)} checks ({min(checks) / 1e9:.3g}–{max(checks) / 1e9:.3g} "
                                         "GFLOP/s)")
        else:
            peak, source = device_peak(accelerator, device_name, precision, threads, home, achieved)
        out: dict[str, Any] = {
            "samples_per_second": round(rate, 3),
            "job_samples_per_second": round(rate * processes, 3),
            "achieved_flops_per_second": float(f"{achieved:.4g}"),
            "peak_flops_per_second": float(f"{peak:.4g}") if peak else None,
            "peak_source": source,
            "mfu": round(achieved / peak, 4) if peak and achieved <= peak else None,
            "data_wait_fraction": round(self.wait_seconds / busy, 4),
        }
        if peak and achieved > peak:
            out["peak_source"] = f"{source}; below the achieved rate (disturbed while measured): no MFU"
        if tokens_per_sample:
            out["tokens_per_second"] = round(rate * tokens_per_sample, 1)
        return out


def compute_type(precision: str) -> torch.dtype:
    """The type a CPU run's matmuls compute in at ``precision``: bf16 for ``bf16-mixed`` / ``bf16-true``, else
    fp32."""
    return torch.bfloat16 if str(precision).startswith("bf16") else torch.float32


def _matmul(precision: str, threads: int) -> str:
    """How a CPU peak's figure names its matmul: ``"bf16 matmul 1024² on 2 thread(s)"``."""
    name = "bf16" if compute_type(precision) == torch.bfloat16 else "fp32"
    return f"{name} matmul {PEAK_SIZE}² on {threads} thread(s)"


def tokens_per_sample(input_shape: tuple[int, ...], input_dtype: str) -> int | None:
    """Tokens in one sample for integer-id inputs (sequence models); ``None`` otherwise."""
    dtype = getattr(torch, input_dtype, None)
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point and not dtype.is_complex:
        return int(math.prod(input_shape))
    return None
