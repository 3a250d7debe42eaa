"""``StopOnSigterm``: a process asked to stop (SIGTERM: a cancelled or timed-out service job, a server
shutting down, a scheduler pre-empting the node) saves ``last.ckpt`` after the batch it is on and ends the run
``stopped`` — resumable exactly from that step — instead of dying between checkpoints.

Lightning notices SIGTERM itself (``trainer.received_sigterm``, shared by every rank) but raises only at the end
of the epoch; this callback acts at the next batch boundary, where the periodic mid-epoch checkpoints are also
taken, so the saved data position and random states resume the same as theirs.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from twinkle_core.ops.notify import after_an_epochs_last_batch
from twinkle_core.processes import EXIT_STOPPED


class StoppedBySignal(SIGTERMException):
    """Training stopped on SIGTERM after saving a checkpoint (``step``, ``checkpoint``)."""

    def __init__(self, step: int, checkpoint: str) -> None:
        """Remember where it stopped."""
        super().__init__(EXIT_STOPPED)
        self.step, self.checkpoint = step, checkpoint

    def __str__(self) -> str:
        """``stopped by SIGTERM at step N (checkpoint saved)``."""
        return f"stopped by SIGTERM at step {self.step}; resumes from its checkpoint"


class StopOnSigterm(L.Callback):
    """Save a checkpoint and stop after the current batch once the process received SIGTERM."""

    def __init__(self, last_path: str) -> None:
        """``last_path``: the run's ``last.ckpt``."""
        self.last_path = last_path
        self._step = -1

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """Note the optimizer step the batch starts at."""
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Checkpoint, then raise ``StoppedBySignal`` (every rank: the save is collective) — only right
        after an optimizer step, never with gradients half accumulated — and not after an epoch's last batch,
        where this hook runs before Lightning counts the batch as done (a checkpoint saved here would make the
        resume run it again). There Lightning stops the run itself right after the hook, its own last checkpoint
        of that step counting the batch, and the run resumes from that."""
        if getattr(trainer, "received_sigterm", False) and trainer.global_step != self._step \
                and not after_an_epochs_last_batch(trainer):
            trainer.save_checkpoint(self.last_path)
            raise StoppedBySignal(trainer.global_step, self.last_path)
