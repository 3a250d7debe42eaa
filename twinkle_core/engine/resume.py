"""Exact resume: random-number states saved in every checkpoint and restored before the next batch.

Lightning restores the loops and — with torchdata's ``StatefulDataLoader`` — the loader's position, but
not Python's, NumPy's or torch's random states. This callback saves them as plain lists (so checkpoints
still load with ``weights_only=True``) and puts them back at the first training batch after a restore, so
a run killed mid-epoch and resumed ends with the same weights as one never interrupted (on CPU).

Under several processes every rank's states are gathered into the checkpoint (rank 0 writes it) and each
rank restores its own; the loader position is the same on every rank (each yields the same number of
batches), so Lightning's saved position serves them all.
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


class ExactResume(L.Callback):
    """Save random states with each checkpoint; restore them when training continues from one."""

    def __init__(self) -> None:
        """Start with nothing to restore."""
        self._pending: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Store every rank's current random states (a list in rank order; every rank calls this)."""
        checkpoint[_KEY] = {"ranks": all_gather(capture_rng())}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Remember this rank's saved states until training restarts."""
        saved = checkpoint.get(_KEY)
        if isinstance(saved, dict) and "ranks" in saved:
            ranks = saved["ranks"]
            rank = global_rank()
            # a job resumed on more processes than saved it: the new ranks keep their seeded states
            self._pending = ranks[rank] if rank < len(ranks) else None
        else:  # a checkpoint written before states were kept per rank
            self._pending = saved

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        """Restore the saved states right before the first batch after a restore."""
        if self._pending is not None:
            restore_rng(self._pending)
            self._pending = None
