"""Continuing from a checkpoint: ``resume``, ``continue`` and ``finetune``.

* ``resume`` — same data; Lightning restores everything (weights, optimizer, schedule, loop position,
  loader position) and ``ExactResume`` the random states. Refused when
  the data's fingerprint changed.
* ``continue`` — new data or more epochs; weights and optimizer state are kept, the schedule and the epoch
  count start afresh.
* ``finetune`` — weights only; a fresh optimizer and schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch

from twinkle_core.data.errors import DataError
from twinkle_core.engine.checkpoints import CheckpointError, load_checkpoint
from twinkle_core.engine.record import CheckpointRecord

class DataChangedError(DataError):
    """``resume`` was asked for, but the data is not the data the checkpoint trained on."""


@dataclass
class Continuation:
    """Where a trainer continues from.

    Attributes:
        mode: ``resume``, ``continue`` or ``finetune``.
        checkpoint_uri: the checkpoint file or sharded folder.
        record: Twinkle's record in the checkpoint (algorithm, hyperparameters, data spec, run, ...).
        global_step: the optimizer step the checkpoint was written at.
        same_run: ``resume`` into the run that wrote the checkpoint (a restart after a crash) rather than a
            new child run.
        loaded: the checkpoint already read whole, if it was (a file is; a sharded folder is read whole only when
            its weights are asked for — a ``resume`` loads its shards in the strategy instead).
    """

    mode: str
    checkpoint_uri: str
    record: CheckpointRecord
    global_step: int = 0
    same_run: bool = False
    loaded: dict[str, Any] | None = field(repr=False, default=None)

    @property
    def state_dict(self) -> dict[str, Any]:
        """The model weights (the checkpoint is read whole on first use)."""
        return self._whole()["state_dict"]

    @property
    def optimizer_states(self) -> list[dict[str, Any]]:
        """The optimizers' states to carry on (``continue`` only; keyed by parameter order)."""
        return list(self._whole().get("optimizer_states", [])) if self.mode == "continue" else []

    def _whole(self) -> dict[str, Any]:
        if self.loaded is None or "state_dict" not in self.loaded:
            self.loaded = load_checkpoint(self.checkpoint_uri)
        return self.loaded

    @property
    def parent_run(self) -> str | None:
        """The ``twinkle://`` URI of the run that wrote the checkpoint."""
        return self.record.run

    def check_data(self, fingerprint: str, uri: str) -> None:
        """For ``resume``: refuse data whose fingerprint differs from the checkpoint's."""
        if self.mode == "resume" and fingerprint != self.record.data_fingerprint:
            raise DataChangedError(
                f"resume needs the data the checkpoint trained on ({self.record.data_uri}, "
                f"{self.record.data_fingerprint}), but '{uri}' is {fingerprint}; "
                "use mode='continue' to train on new data"
            )


def check_compatible(state_dict: dict[str, Any], model_state: dict[str, Any], uri: str) -> None:
    """Refuse weights whose names or shapes do not fit the model built for the new data."""
    missing = sorted(set(model_state) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(model_state))
    mismatched = [k for k in model_state if k in state_dict and tuple(state_dict[k].shape) != tuple(model_state[k].shape)]
    if missing or unexpected or mismatched:
        detail = "; ".join(
            f"{label}: {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape differs", mismatched))
            if keys
        )
        raise CheckpointError(
            f"checkpoint '{uri}' does not fit the model built for this data ({detail}); the data's features or "
            "classes differ from the checkpoint's — train a new run instead"
        )


class RestoreOptimizerState(L.Callback):
    """Load saved optimizer states into the fresh optimizers when training starts (``continue``)."""

    def __init__(self, states: list[dict[str, Any]]) -> None:
        """Keep the states until ``on_train_start``."""
        self.states = states

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Copy each state into its optimizer (lr and schedule settings of the new run are kept); parameters
        split over devices (Lightning's ``ModelParallelStrategy``) get their shard of each saved full state."""
        from lightning.pytorch.strategies import ModelParallelStrategy

        split = isinstance(trainer.strategy, ModelParallelStrategy)
        pipeline = getattr(pl_module, "pipeline", None)
        for optimizer, state in zip(trainer.optimizers, self.states):
            current = [dict(g) for g in optimizer.param_groups]
            if pipeline is not None:  # this rank's stages take their share
                pipeline.load_optimizer_state(optimizer, state)
            elif split:
                _load_full_state(pl_module, optimizer, state)
            else:
                optimizer.load_state_dict(state)
            for group, fresh in zip(optimizer.param_groups, current):
                group.update({k: v for k, v in fresh.items() if k != "params"})
                for param in group["params"]:  # a reshaped parameter (a remapped head) starts afresh
                    saved = optimizer.state.get(param, {})
                    if any(torch.is_tensor(v) and v.dim() and v.shape != param.shape for v in saved.values()):
                        del optimizer.state[param]


def _load_full_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a whole (unsharded) optimizer state, keyed by parameter index as ``Optimizer.state_dict`` writes it,
    into an optimizer over ``module``'s sharded or split parameters (each rank keeps its shard)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel, OptimStateKeyType

    by_name = FullyShardedDataParallel.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_NAME, module)
    set_optimizer_state_dict(module, optimizer, optim_state_dict=by_name,
                             options=StateDictOptions(full_state_dict=True))

