"""Faults for tests of recovery: ``KillAtStep`` SIGKILLs the training process at a chosen step, so that
nothing can mark the run or flush anything (what a power cut or the OOM killer does)."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning as L


class KillAtStep(L.Callback):
    """SIGKILL this process when optimizer step ``step`` is about to start (pass it as a ``Trainer`` callback
    in a subprocess, then resume the run and compare it with one never interrupted)."""

    def __init__(self, step: int) -> None:
        """Kill before ``step`` (``trainer.global_step``) begins."""
        self.step = int(step)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """Kill the process at the chosen step."""
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
