"""Sharded checkpoints of a model split over processes (Lightning's ``ModelParallelStrategy``: FSDP2, tensor and
pipeline parallel): every process writes its own shard of the weights and the optimizer state through
``torch.distributed.checkpoint`` (DCP) — no process gathers the whole model — and a run loads them at any layout.

A checkpoint is then a folder named as the file would be (``last.ckpt/``): DCP's shard files and index, and
``meta.pt`` — rank 0's ``torch.save`` of everything else (loops, callbacks, Twinkle's record, random states, and the
optimizers' parameter groups, parameters by name). Only tensors go to DCP, so reading one never unpickles anything
else (``engine.checkpoints``). The folder is written as ``<name>.partial`` and moved into place by rank 0 once every
rank has written its shard and ``meta.pt`` is down, so a run killed while saving keeps its previous checkpoint.

Loading reshards: DCP reads into this layout's shard of each tensor whatever layout wrote it (tp 2 → dp 2, 2
processes → 4). A one-process run, ``Trainer.from_checkpoint``, exports and ``twinkle runs publish`` read such a
folder whole (``checkpoints.read_sharded``); a whole file loads here too. Checkpoints off this machine's disk
stay whole files written by rank 0 (DCP writes local folders).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from twinkle_core.engine.checkpoints import (SHARDS_KEY, SHARDS_META, SafeReader, TensorsOnly, is_sharded,
                                             read_shards_meta)
from twinkle_core.store.atomic import atomic_write_bytes

PARTIAL = ".partial"
"""Suffix of a checkpoint folder still being written."""


class ShardedModelParallelStrategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` whose checkpoints are sharded folders (see the module)."""

    def __init__(self, data_parallel_size: int, tensor_parallel_size: int, sharded: bool = True) -> None:
        """A ``data × tensor`` layout; ``sharded=False`` writes whole files on rank 0 instead."""
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size,
                         save_distributed_checkpoint=sharded)

    @property
    def sharded(self) -> bool:
        """Whether checkpoints are written as sharded folders."""
        return bool(self._save_distributed_checkpoint)

    # ------------------------------------------------------------------ what each rank holds
    def local_model_state(self) -> dict[str, Any]:
        """This rank's shards of the weights (``DTensor`` s), under their names in the whole module."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        assert self.model is not None
        return get_model_state_dict(self.model)

    def local_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's shards of ``optimizer``'s state: ``state`` by parameter name, ``param_groups`` naming every
        parameter of the whole module (an optimizer that never stepped gets its state created)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        assert self.model is not None
        return get_optimizer_state_dict(self.model, optimizer)

    def load_local_states(self, model: dict[str, Any], optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]]
                          ) -> None:
        """Put loaded shards back: the weights, then each optimizer's state (``local_optimizer_state``'s shape)."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        assert self.model is not None
        set_model_state_dict(self.model, model)
        for optimizer, state in optimizers:
            set_optimizer_state_dict(self.model, optimizer, optim_state_dict=state)

    # ------------------------------------------------------------------ Lightning's hooks
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """This rank's shards (sharded) or the whole weights on rank 0 (whole files)."""
        return self.local_model_state() if self.sharded else super().lightning_module_state_dict()

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """This rank's shards of the optimizer state (sharded) or the whole state on rank 0 (whole files)."""
        if not self.sharded:
            return super().optimizer_state(optimizer)
        return self.local_optimizer_state(getattr(optimizer, "_optimizer", optimizer))  # LightningOptimizer

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Write the sharded folder (every rank its shard), or — not sharded — a whole file on rank 0."""
        if not self.sharded:
            super().save_checkpoint(checkpoint, filepath, storage_options)
            return
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter

        path = str(self.broadcast(str(filepath)))
        tensors: dict[str, Any] = {"state_dict": {k: v for k, v in checkpoint.pop("state_dict").items()
                                                  if torch.is_tensor(v)}}
        kept = []
        for number, state in enumerate(checkpoint.pop("optimizer_states", [])):
            tensors[f"optimizer_{number}"] = {"state": _tensors_of(state["state"])}
            plain = {name: {k: v for k, v in values.items() if not torch.is_tensor(v)}
                     for name, values in state["state"].items()}
            kept.append({"param_groups": state["param_groups"], "plain": {k: v for k, v in plain.items() if v}})
        checkpoint[SHARDS_KEY] = {"optimizers": kept}
        partial = path + PARTIAL
        if self.is_global_zero:
            _remove(partial)
            os.makedirs(partial)
        self.barrier("sharded_checkpoint_start")
        dcp.save(tensors, storage_writer=FileSystemWriter(partial))
        if self.is_global_zero:
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            atomic_write_bytes(os.path.join(partial, SHARDS_META), buffer.getvalue())
            _replace(partial, path)
        self.barrier("sharded_checkpoint_done")

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Load a sharded folder (any layout's) into this layout's shards, or a whole file; returns the rest of the
        checkpoint (loops, callbacks, Twinkle's record)."""
        path = str(self.broadcast(str(checkpoint_path)))
        if not is_sharded(path):
            return self.load_whole_checkpoint(path, weights_only)
        import torch.distributed.checkpoint as dcp

        meta = read_shards_meta(path)
        saved = (meta.pop(SHARDS_KEY, None) or {}).get("optimizers", [])
        model = self.local_model_state()
        states = [self.local_optimizer_state(optimizer) for optimizer in self.optimizers]
        target: dict[str, Any] = {"state_dict": model}
        for number, state in enumerate(states[:len(saved)]):
            target[f"optimizer_{number}"] = {"state": _tensors_of(state["state"])}
        dcp.load(target, storage_reader=SafeReader(path), planner=TensorsOnly())
        loaded = []
        for number, (optimizer, state) in enumerate(zip(self.optimizers, states)):
            if number >= len(saved):
                continue
            tensors = target[f"optimizer_{number}"]["state"]
            state["state"] = {name: {**saved[number]["plain"].get(name, {}), **tensors.get(name, {})}
                              for name in state["state"]}
            for group, old in zip(state["param_groups"], saved[number]["param_groups"]):
                group.update({k: v for k, v in old.items() if k != "params"})  # lr, betas, ... as saved
            loaded.append((optimizer, state))
        self.load_local_states(target["state_dict"], loaded)
        return meta

    def load_whole_checkpoint(self, path: str, weights_only: bool | None = None) -> dict[str, Any]:
        """Load a whole checkpoint file: Lightning's way (each rank takes its shard of every tensor)."""
        return super().load_checkpoint(Path(path), weights_only=weights_only)


def _tensors_of(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """An optimizer state's tensors only (by parameter name, then by state name)."""
    return {name: {k: v for k, v in values.items() if torch.is_tensor(v)} for name, values in state.items()}


def _remove(path: str) -> None:
    """Delete a file or folder if it is there."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _replace(partial: str, path: str) -> None:
    """Move a finished folder over ``path`` (a folder or a whole file of an earlier layout): the old one is renamed
    aside first, then removed, so ``path`` is always a whole checkpoint but for the instant between two renames."""
    old = path + ".old"
    _remove(old)
    if os.path.lexists(path):
        os.rename(path, old)
    os.rename(partial, path)
    _remove(old)
