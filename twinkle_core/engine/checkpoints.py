"""Checkpoints: written atomically, read safely (``weights_only=True``), checked before use.

A checkpoint is a file (``torch.save`` of Lightning's dict, written by rank 0) or — for a model split over
processes (``engine.sharded``) — a folder of the same name that every process wrote its shard into through
``torch.distributed.checkpoint`` (DCP): the tensors in DCP's files, everything else in ``meta.pt``. Either reads
back here as the same whole dict, in one process, without unpickling anything but tensors and plain data: DCP's
own index (``.metadata``, a pickle) is read by an unpickler that admits only DCP's record classes, and no item
DCP stores as pickled bytes is ever loaded.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import warnings
from typing import Any, Iterator

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

from twinkle_core.pretrained import UnsafeWeightsError, WeightsError, torch_load
from twinkle_core.store.atomic import atomic_writer
from twinkle_core.uris import filesystem, is_local, require_exists

TWINKLE_KEY = "twinkle"
"""Checkpoint key holding Twinkle's record: algorithm, target, task, hyperparameters, data spec, run."""

SHARDS_META = "meta.pt"
"""The file of a sharded checkpoint folder holding all but its tensors (loops, callbacks, Twinkle's record, random
states, and under ``SHARDS_KEY`` the optimizers' parameter groups and non-tensor state)."""

SHARDS_KEY = "twinkle_shards"
"""Key in ``meta.pt``: per optimizer, ``param_groups`` (parameters by name) and ``plain`` (non-tensor state)."""


WEIGHTS_ONLY_KEY = "twinkle_weights_only"
"""Set (``True``) in a checkpoint written without the optimizers' and schedulers' states (a run's best checkpoint)."""

WEIGHTS_ONLY_NAMES = ("best.ckpt",)
"""File names ``AtomicCheckpointIO`` writes without the optimizers' and schedulers' states: a run's best
checkpoint serves evaluation, prediction, exports and fine-tuning, which read its weights; resuming and continuing
read ``last.ckpt``. (ResNet-18: 45 MB instead of 135 MB, written every epoch the metric improves.)"""


class CheckpointError(WeightsError):
    """A checkpoint that cannot be used: missing, corrupt, unsafe, or of another algorithm."""


class UnsafeCheckpointError(CheckpointError, UnsafeWeightsError):
    """A checkpoint whose loading would run code (it pickles objects beyond tensors and plain data)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that never leaves a half-written file and loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        """Serialise in memory, then write to a temporary name and rename over ``path`` (without the optimizers'
        and schedulers' states when its name is one of ``WEIGHTS_ONLY_NAMES``)."""
        if str(path).replace("\\", "/").rsplit("/", 1)[-1] in WEIGHTS_ONLY_NAMES:
            checkpoint = {**{k: v for k, v in checkpoint.items() if k not in ("optimizer_states", "lr_schedulers")},
                          WEIGHTS_ONLY_KEY: True}
        with atomic_writer(str(path)) as handle:  # streamed: no second copy of the state in memory
            torch.save(checkpoint, handle)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Load with ``load_checkpoint`` (safe, with named errors; a sharded folder as a whole dict)."""
        return load_checkpoint(str(path))


class LastCheckpoint(ModelCheckpoint):
    """Lightning's checkpoint of the newest state (no monitor, top-1: ``last.ckpt``) written every
    ``every_n_epochs`` epochs (the plan's ``checkpoint_every_n_epochs``) — and always after the training's last
    epoch (the planned last, or one after which the run stops: early stopping, ``max_steps``), so that a finished
    run's ``last.ckpt`` holds its final state whatever the interval."""

    def __init__(self, dirpath: str, every_n_epochs: int = 1) -> None:
        """``last.ckpt`` in ``dirpath``, every ``every_n_epochs`` epochs."""
        super().__init__(dirpath=dirpath, filename="last", save_top_k=1, enable_version_counter=False,
                         every_n_epochs=every_n_epochs)

    @staticmethod
    def is_final_epoch(trainer: L.Trainer) -> bool:
        """Whether the epoch now ending is the training's last."""
        planned = trainer.max_epochs is not None and trainer.max_epochs >= 0 \
            and trainer.current_epoch + 1 >= trainer.max_epochs
        steps = trainer.max_steps is not None and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        return bool(trainer.should_stop or planned or steps)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's save after validation, every epoch when it is the last."""
        with self._every_epoch_if_final(trainer):
            super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Lightning's save at an epoch's end (a run without validation), every epoch when it is the last."""
        with self._every_epoch_if_final(trainer):
            super().on_train_epoch_end(trainer, pl_module)

    @contextlib.contextmanager
    def _every_epoch_if_final(self, trainer: L.Trainer) -> Iterator[None]:
        every = self._every_n_epochs
        if every > 1 and self.is_final_epoch(trainer):
            self._every_n_epochs = 1
        try:
            yield
        finally:
            self._every_n_epochs = every


def load_torch_file(uri: str, what: str = "checkpoint") -> Any:
    """Read a torch file (a checkpoint, a state dict of weights) from any URI with ``weights_only=True`` — or a
    sharded checkpoint folder, read whole (``read_sharded``).

    Raises:
        CheckpointError: missing or corrupt (truncated, not a torch file); the message names it.
        UnsafeCheckpointError: it would unpickle code (nothing ran); the message names it and says how to re-save.
    """
    fs, path = require_exists(uri, what)
    if fs.isdir(path) and is_sharded(uri):
        return read_sharded(uri)
    try:
        return torch_load(fs.cat_file(path), uri, what=what)
    except UnsafeWeightsError as err:
        raise UnsafeCheckpointError(str(err)) from None
    except WeightsError as err:
        raise CheckpointError(str(err)) from None


def load_checkpoint(uri: str, tensors: bool = True) -> dict[str, Any]:
    """Read a Lightning checkpoint from any URI with ``torch.load(weights_only=True)`` — a file, or a sharded folder
    gathered whole (``read_sharded``); ``tensors=False`` reads a sharded folder's ``meta.pt`` only (Twinkle's
    record, the loops; no ``state_dict``), a file whole.

    Raises:
        CheckpointError: missing or corrupt (truncated, not a torch file); the message names it.
        UnsafeCheckpointError: it would unpickle code; the message says how to re-save it.
    """
    if is_sharded(uri):
        if not tensors:
            return {k: v for k, v in read_shards_meta(uri).items() if k != SHARDS_KEY}
        return read_sharded(uri)
    fs, path = filesystem(str(uri))
    if fs.isdir(path):
        raise CheckpointError(f"'{uri}' is a folder but not a finished sharded checkpoint (no {SHARDS_META}): its "
                              "save did not finish; use the run's previous checkpoint")
    checkpoint = load_torch_file(uri, "checkpoint")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"'{uri}' is not a Lightning checkpoint (no state_dict); pass a Twinkle run's checkpoint")
    return checkpoint


def is_sharded(uri: str) -> bool:
    """Whether ``uri`` is a finished sharded checkpoint folder (it holds ``meta.pt``, which rank 0 writes last)."""
    fs, path = filesystem(str(uri))
    return bool(fs.isdir(path) and fs.exists(f"{path.rstrip('/')}/{SHARDS_META}"))


def read_shards_meta(uri: str) -> dict[str, Any]:
    """A sharded checkpoint folder's ``meta.pt`` (all but its tensors, ``SHARDS_KEY`` included), read safely."""
    return load_torch_file(f"{str(uri).rstrip('/')}/{SHARDS_META}", "checkpoint metadata")


class SafeReader(FileSystemReader):
    """DCP's reader of a checkpoint folder, reading its index (``.metadata``) with ``_IndexUnpickler``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        """The folder's index, or ``UnsafeCheckpointError`` when it pickles anything but DCP's records."""
        from torch.distributed.checkpoint.metadata import StorageMeta

        path = os.path.join(str(self.path), ".metadata")
        try:
            with open(path, "rb") as stream:
                metadata = _IndexUnpickler(stream).load()
        except FileNotFoundError:
            raise CheckpointError(f"'{self.path}' lacks DCP's .metadata: the save did not finish; use another "
                                  "checkpoint") from None
        except _Refused as err:
            raise UnsafeCheckpointError(f"'{path}' would run code when loaded ({err}), so Twinkle refuses it and "
                                        "nothing ran; use a checkpoint folder Twinkle wrote") from None
        except Exception as err:  # noqa: BLE001 — a truncated or foreign index fails in many ways
            raise CheckpointError(f"'{path}' is corrupt ({type(err).__name__}: {err}); use another checkpoint"
                                  ) from None
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class TensorsOnly(DefaultLoadPlanner):
    """DCP's load planner that refuses items stored as pickled bytes (DCP would unpickle them with
    ``weights_only=False``); Twinkle's sharded folders hold tensors only."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        """Refuse: the item is a pickle."""
        raise UnsafeCheckpointError(f"checkpoint item '{read_item.dest_index.fqn}' is pickled bytes, which would "
                                    "run code when loaded; Twinkle refuses it and nothing ran")


def sharded_folder(uri: str) -> str:
    """The local path of a sharded checkpoint folder.

    Raises:
        CheckpointError: it is not on the local file system (DCP reads local folders); the message says so.
    """
    fs, path = filesystem(str(uri))
    if not is_local(fs):
        raise CheckpointError(f"sharded checkpoint '{uri}' is not on a local disk; copy the folder locally first")
    return path


def read_sharded(uri: str) -> dict[str, Any]:
    """A sharded checkpoint folder read whole in this process: the dict a one-process run's checkpoint file holds
    (``state_dict``, ``optimizer_states`` keyed by parameter order, loops, callbacks, Twinkle's record).

    Raises:
        CheckpointError: unfinished or corrupt folder. UnsafeCheckpointError: its index pickles code.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    path = sharded_folder(uri)
    reader = SafeReader(path)
    index = reader.read_metadata()
    meta = read_shards_meta(path)
    flat = {key: torch.empty(tuple(item.size), dtype=item.properties.dtype)
            for key, item in index.state_dict_metadata.items() if isinstance(item, TensorStorageMetadata)}
    try:
        with warnings.catch_warnings():  # "torch.distributed is disabled ...": one process reads it, as meant
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(flat, storage_reader=reader, planner=TensorsOnly(), no_dist=True)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 — DCP reports a truncated or missing shard in many ways
        raise CheckpointError(f"sharded checkpoint '{uri}' is corrupt ({type(err).__name__}: {err}); "
                              "use another checkpoint") from None
    nested: dict[str, Any] = {}
    for key, tensor in flat.items():
        route = index.planner_data.get(key, (key,)) if isinstance(index.planner_data, dict) else (key,)
        place = nested
        for step in route[:-1]:
            place = place.setdefault(step, {})
        place[route[-1]] = tensor
    return whole_checkpoint(meta, nested)


def whole_checkpoint(meta: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    """A sharded folder's ``meta.pt`` and its tensors (``state_dict`` and ``optimizer_N.state``) as one
    checkpoint dict, each optimizer's state keyed by its parameters' order as ``Optimizer.state_dict`` keys it."""
    checkpoint = {k: v for k, v in meta.items() if k != SHARDS_KEY}
    checkpoint["state_dict"] = tensors.get("state_dict", {})
    states = []
    for number, saved in enumerate((meta.get(SHARDS_KEY) or {}).get("optimizers", [])):
        values = (tensors.get(f"optimizer_{number}") or {}).get("state", {})
        order = [name for group in saved["param_groups"] for name in group["params"]]
        state = {}
        for index, name in enumerate(order):
            merged = {**saved["plain"].get(name, {}), **values.get(name, {})}
            if merged:
                state[index] = merged
        groups, start = [], 0
        for group in saved["param_groups"]:
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(start, start + len(group["params"])))})
            start += len(group["params"])
        states.append({"state": state, "param_groups": groups})
    checkpoint["optimizer_states"] = states
    return checkpoint


_INDEX_CLASSES = {("torch.distributed.checkpoint.metadata", name) for name in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
    "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict")}


class _Refused(pickle.UnpicklingError):
    """The index names a global outside ``_INDEX_CLASSES``."""


class _IndexUnpickler(pickle.Unpickler):
    """Unpickles DCP's index: its record classes, ``torch.Size``, dtypes and paths; any other global refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _INDEX_CLASSES or (module == "torch" and isinstance(getattr(torch, name, None),
                                                                                  torch.dtype)):
            return super().find_class(module, name)
        raise _Refused(f"it names {module}.{name}")
