"""Exact resume: random-number states saved in every checkpoint and restored before the next batch.

Lightning restores the loops and — with torchdata's ``StatefulDataLoader`` — the loader's position, but
not Python's, NumPy's or torch's random states. This callback saves them as plain lists (so checkpoints
still load with ``weights_only=True``) and puts them back at the first training batch after a restore, so
a run killed mid-epoch and resumed ends with the same weights as one never interrupted (on CPU).

Under several processes every rank's states are gathered into the checkpoint (rank 0 writes it) and each
rank restores its own; the loader position is the same on every rank (each yields the same number of
batches), so Lightning's saved position serves them all.

Lightning also does not save what its epoch-level metrics have accumulated (``self.log(..., on_epoch=True)``: a
mean's weighted sum and count, a max, a sum), so an epoch resumed in its middle would report ``train_loss_epoch``
over only the batches after the resume. The callback saves each rank's accumulators with the checkpoint and, at the
first training batch after a restore into the same epoch, adds them back, so the epoch's figures are those of the
uninterrupted run.

An algorithm may hold more that the next batches depend on (reinforcement learning's rollout, reused for several
updates): its ``rank_state()`` is gathered from every rank into the checkpoint the same way and handed back to each
rank's ``load_rank_state`` before the first batch after a restore.
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch

from twinkle_core.engine.ranks import all_gather, global_rank

_KEY = "twinkle_rng"


def capture_rng() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) random states as plain, ``weights_only``-safe values."""
    version, state, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(state), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def restore_rng(states: dict[str, Any]) -> None:
    """Put back states captured by ``capture_rng``."""
    version, state, gauss = states["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in states["cuda"]])


def epoch_sums(trainer: L.Trainer) -> dict[str, Any]:
    """What this rank's epoch-level training metrics have accumulated so far this epoch, as plain values:
    ``{"epoch": n, "metrics": {key: {"value": v, "count": batch samples or None}}}`` (see the module docstring)."""
    found: dict[str, Any] = {}
    results = getattr(trainer.fit_loop.epoch_loop, "_results", None)  # Lightning's training result collection
    for key, metric in (results or {}).items():
        meta = getattr(metric, "meta", None)
        if not getattr(metric, "is_tensor", False) or meta is None or not meta.on_epoch:
            continue
        count = metric.cumulated_batch_size if meta.is_mean_reduction else None
        found[key] = {"value": float(metric.value), "count": None if count is None else int(count)}
    return {"epoch": int(trainer.current_epoch), "metrics": found}


def add_epoch_sums(trainer: L.Trainer, saved: dict[str, Any]) -> None:
    """Add ``saved`` (``epoch_sums`` of a checkpoint of this epoch) to what the epoch's metrics hold now."""
    results = getattr(trainer.fit_loop.epoch_loop, "_results", None)
    for key, before in saved.get("metrics", {}).items():
        metric = (results or {}).get(key)
        meta = getattr(metric, "meta", None)
        if metric is None or meta is None or not getattr(metric, "is_tensor", False):
            continue
        value = torch.tensor(before["value"], dtype=metric.value.dtype)
        if meta.is_mean_reduction and before.get("count") is not None:
            metric.value = metric.value + value
            metric.cumulated_batch_size = metric.cumulated_batch_size + int(before["count"])
        elif meta.is_max_reduction or meta.is_min_reduction:
            metric.value = meta.reduce_fx(torch.stack([metric.value, value]))
        elif meta.is_sum_reduction:
            metric.value = metric.value + value


class ExactResume(L.Callback):
    """Save random states and the epoch's metric sums with each checkpoint; restore them when training continues
    from one."""

    def __init__(self) -> None:
        """Start with nothing to restore."""
        self._pending: dict[str, Any] | None = None
        self._sums: dict[str, Any] | None = None
        self._state: Any = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Store every rank's current random states, epoch sums and the algorithm's ``rank_state`` (lists in rank
        order; every rank calls this)."""
        own = pl_module.rank_state() if hasattr(pl_module, "rank_state") else None
        gathered = all_gather((capture_rng(), epoch_sums(trainer), own))  # one collective
        checkpoint[_KEY] = {"ranks": [rng for rng, _, _ in gathered], "epoch_sums": [sums for _, sums, _ in gathered]}
        if any(state is not None for _, _, state in gathered):
            checkpoint[_KEY]["rank_states"] = [state for _, _, state in gathered]

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Remember this rank's saved states until training restarts."""
        saved = checkpoint.get(_KEY)
        rank = global_rank()
        if isinstance(saved, dict) and "ranks" in saved:
            ranks = saved["ranks"]
            # a job resumed on more processes than saved it: the new ranks keep their seeded states
            self._pending = ranks[rank] if rank < len(ranks) else None
            sums = saved.get("epoch_sums") or []
            self._sums = sums[rank] if rank < len(sums) else None
            states = saved.get("rank_states") or []
            self._state = states[rank] if rank < len(states) else None
        else:  # a checkpoint written before states were kept per rank
            self._pending = saved

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        """Restore the saved states right before the first batch after a restore."""
        if self._pending is not None:
            restore_rng(self._pending)
            self._pending = None
        if self._state is not None:
            pl_module.load_rank_state(self._state)  # type: ignore[attr-defined]
            self._state = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """After the first batch after a restore into the epoch the checkpoint was written in, add the epoch's
        saved metric sums to what that batch logged."""
        if self._sums is not None:
            if int(self._sums.get("epoch", -1)) == trainer.current_epoch:
                add_epoch_sums(trainer, self._sums)
            self._sums = None
