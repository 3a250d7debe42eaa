"""What a speed probe measured: a few real training steps of the run's model on one of its batches, in each
configuration a speed decider chooses between (precision, memory format), and the time its data takes to load.

The measuring is the engine's (``twinkle_core.engine.probes``); this module holds the figures the deciders read
(``PlanContext.probe``) and the rules that compare them, so that a decider's choice given a probe result is a
pure function (tested without timing anything).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

LOSS_TOLERANCE = 0.05
"""How far a configuration's loss may lie from fp32's at the same probe step (relative to fp32's first loss) and
still agree."""

CLEARLY_FASTER = 1.1
"""A configuration other than the default is chosen only when it is at least this much faster (the issue's rule:
a gain within the probe's noise is no gain)."""


@dataclass(frozen=True)
class ProbeRun:
    """One configuration's steps.

    Attributes:
        precision: the Lightning precision it ran in (``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``).
        memory_format: ``"contiguous"`` or ``"channels_last"``.
        step_seconds: wall-clock seconds of each measured step (forward, backward, optimizer step).
        cpu_seconds: CPU seconds of each measured step (every thread of the process).
        losses: the loss of each step, warm-up included (each configuration starts from the same weights and
            trains on the same batch).
        allocator: the process's ``malloc`` thresholds during its steps: ``"default"`` (glibc's) or ``"retain"``
            (freed memory kept in the process; ``twinkle_core.engine.allocator``).
        page_faults: the process's minor page faults during each measured step (empty: not counted).
    """

    precision: str
    memory_format: str
    step_seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]
    losses: tuple[float, ...]
    allocator: str = "default"
    page_faults: tuple[int, ...] = ()

    @property
    def seconds_per_step(self) -> float:
        """The fastest wall-clock step: another process's load only ever adds time, so the minimum over the
        interleaved rounds is the configuration's own speed (on this project's shared 2-core machine the median of
        one configuration moved by ±20 % between probes, the minimum by a few per cent)."""
        return min(self.step_seconds) if self.step_seconds else math.inf

    @property
    def median_seconds_per_step(self) -> float:
        """The median wall-clock step (what a loaded machine gives)."""
        return statistics.median(self.step_seconds) if self.step_seconds else math.inf

    @property
    def cpu_seconds_per_step(self) -> float:
        """The median CPU time of a step."""
        return statistics.median(self.cpu_seconds) if self.cpu_seconds else math.inf

    @property
    def faults_per_step(self) -> float | None:
        """The median page faults of a step (``None``: not counted)."""
        return statistics.median(self.page_faults) if self.page_faults else None

    @property
    def finite(self) -> bool:
        """Whether every loss was a finite number."""
        return all(math.isfinite(loss) for loss in self.losses)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values, with the medians."""
        return {**asdict(self), "seconds_per_step": round(self.seconds_per_step, 6),
                "median_seconds_per_step": round(self.median_seconds_per_step, 6),
                "cpu_seconds_per_step": round(self.cpu_seconds_per_step, 6)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRun:
        """Read ``to_dict``'s form."""
        return cls(str(data["precision"]), str(data["memory_format"]), tuple(data["step_seconds"]),
                   tuple(data["cpu_seconds"]), tuple(data["losses"]), str(data.get("allocator", "default")),
                   tuple(int(f) for f in data.get("page_faults", ())))


@dataclass
class SpeedProbe:
    """A probe's result.

    Attributes:
        runs: each configuration's measurement (the first is the baseline: fp32, contiguous; see ``allocator``).
        batch: the probed batch, described (``"float32 [64, 3, 32, 32], int64 [64]"``).
        batch_size: samples in it.
        threads: the torch threads the steps ran with.
        load_seconds_per_batch: the median time to read and collate one batch in this process (``None``: not
            measured).
        seconds: what the probe itself took.
        key: the probe's identity in the store (machine, model signature, batch shape, configurations).
        reused: where the result came from when it was not measured now (the store's file), else ``None``.
        checkpoint_seconds: the time to write the training state (the weights and the optimizer's state, as a
            checkpoint is written: serialised, flushed to disk, renamed) into the store, the mean of two writes
            (``None``: not measured — a probe without a store).
        checkpoint_bytes: the size of that state on disk.
    """

    runs: list[ProbeRun]
    batch: str
    batch_size: int
    threads: int
    load_seconds_per_batch: float | None = None
    seconds: float = 0.0
    key: str = ""
    reused: str | None = None
    notes: list[str] = field(default_factory=list)
    checkpoint_seconds: float | None = None
    checkpoint_bytes: int | None = None

    @property
    def measured(self) -> str:
        """How a decision names its figures: ``"measured"``, or ``"measured earlier"`` for a stored probe."""
        return "measured" if self.reused is None else "measured earlier"

    def run(self, precision: str, memory_format: str = "contiguous", allocator: str | None = None) -> ProbeRun | None:
        """The run of that configuration (``allocator``: by default the one the configurations were compared
        under, ``SpeedProbe.allocator``), if probed."""
        allocator = allocator or self.allocator
        return next((r for r in self.runs if r.precision == precision and r.memory_format == memory_format
                     and r.allocator == allocator), None)

    @property
    def baseline(self) -> ProbeRun:
        """The first run (fp32, contiguous, under ``allocator``)."""
        return self.runs[0]

    @property
    def allocator(self) -> str:
        """The allocator the configurations were compared under (the baseline's: ``"retain"`` on a CPU under
        glibc, where the baseline also ran with the allocator as it is; else ``"default"``)."""
        return self.baseline.allocator

    def allocator_factor(self, allocator: str) -> float:
        """How many times longer the baseline's median step is under ``allocator`` than under ``self.allocator``
        (1 where it is the same or was not measured): a time estimate's correction for a plan whose allocator is
        not the one the configurations were compared under."""
        other = self.run("32-true", "contiguous", allocator)
        if other is None or allocator == self.allocator or self.baseline.median_seconds_per_step <= 0:
            return 1.0
        return other.median_seconds_per_step / self.baseline.median_seconds_per_step

    @property
    def twin(self) -> ProbeRun | None:
        """The baseline's second measurement — the same fp32 step under the other allocator (a CPU under glibc) —
        or ``None`` where the baseline was measured once."""
        return next((r for r in self.runs[1:] if (r.precision, r.memory_format) ==
                     (self.baseline.precision, self.baseline.memory_format)), None)

    @property
    def disturbed(self) -> bool:
        """Whether the baseline's two measurements (``twin``) have fastest steps more than ``DISTURBED`` times
        apart: the machine's load changed while the probe measured, so its comparisons are not to be trusted or
        remembered. A probe that measured the baseline once is never taken as disturbed."""
        if self.twin is None:
            return False
        fast, slow = sorted((self.baseline.seconds_per_step, self.twin.seconds_per_step))
        return slow > DISTURBED * fast

    def speedup(self, run: ProbeRun, over: ProbeRun | None = None) -> float:
        """How many times faster ``run``'s step is than ``over``'s (default: the baseline's)."""
        other = over or self.baseline
        return other.seconds_per_step / run.seconds_per_step if run.seconds_per_step > 0 else 0.0

    def loss_gap(self, run: ProbeRun, over: ProbeRun | None = None) -> float:
        """The largest difference between ``run``'s losses and ``over``'s (default: the baseline's) at the same
        step, relative to ``over``'s first loss; infinite when a loss is not finite.

        Relative to the first loss, not to each step's: the probe trains on one batch, so its loss falls fast,
        and a difference of rounding that a falling loss carries along would otherwise read as a growing share of
        a shrinking number (ResNet-18 on digits, bf16 against fp32, by each step's own loss: within 1.6 % over
        8 steps, 5.5 % over 12 — a difference that grew only because the loss shrank)."""
        other = over or self.baseline
        if not (run.finite and other.finite):
            return math.inf
        scale = max(abs(other.losses[0]), 1e-3) if other.losses else 1.0
        gaps = [abs(a - b) / scale for a, b in zip(run.losses, other.losses)]
        return max(gaps, default=0.0)

    def agrees(self, run: ProbeRun, over: ProbeRun | None = None) -> bool:
        """Whether ``run``'s losses agree with ``over``'s within ``LOSS_TOLERANCE``."""
        return self.loss_gap(run, over) <= LOSS_TOLERANCE

    def step_seconds(self, precision: str, memory_format: str = "contiguous") -> float | None:
        """The fastest step of a configuration (``ProbeRun.seconds_per_step``), if probed."""
        run = self.run(precision, memory_format)
        return run.seconds_per_step if run is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (what ``plan.json`` and the store keep)."""
        return {"runs": [r.to_dict() for r in self.runs], "batch": self.batch, "batch_size": self.batch_size,
                "threads": self.threads, "load_seconds_per_batch": self.load_seconds_per_batch,
                "seconds": round(self.seconds, 3), "key": self.key, "reused": self.reused, "notes": list(self.notes),
                "checkpoint_seconds": None if self.checkpoint_seconds is None else round(self.checkpoint_seconds, 4),
                "checkpoint_bytes": self.checkpoint_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeedProbe:
        """Read ``to_dict``'s form."""
        return cls([ProbeRun.from_dict(r) for r in data["runs"]], str(data["batch"]), int(data["batch_size"]),
                   int(data["threads"]), data.get("load_seconds_per_batch"), float(data.get("seconds", 0.0)),
                   str(data.get("key", "")), data.get("reused"), list(data.get("notes", [])),
                   data.get("checkpoint_seconds"), data.get("checkpoint_bytes"))


DISTURBED = 1.5
"""How far apart the fastest steps of the probe's two measurements of its fp32 baseline (one under each allocator)
may be before the probe is taken as disturbed (``SpeedProbe.disturbed``): keeping freed memory moves a step by a few
per cent (1.00–1.01× in this project's benches), another process starting on a 2-core machine by many times (a
probe that overlapped one: 567 ms a step against 60.4 ms)."""


def milliseconds(seconds: float) -> str:
    """``0.0123`` → ``"12.3 ms"``."""
    return f"{seconds * 1e3:.3g} ms"


__all__ = ["CLEARLY_FASTER", "DISTURBED", "LOSS_TOLERANCE", "ProbeRun", "SpeedProbe"]
