"""Checkpoints: written atomically, read safely (``weights_only=True``), checked before use."""

from __future__ import annotations

import io
import pickle
import zipfile
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from twinkle_core.errors import TwinkleError
from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.uris import require_exists

TWINKLE_KEY = "twinkle"
"""Checkpoint key holding Twinkle's record: algorithm, target, task, hyperparameters, data spec, run."""


class CheckpointError(TwinkleError):
    """A checkpoint that cannot be used: missing, corrupt, unsafe, or of another algorithm."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose loading would run code (it pickles objects beyond tensors and plain data)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that never leaves a half-written file and loads with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        """Serialise in memory, then write to a temporary name and rename over ``path``."""
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(str(path), buffer.getvalue())

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Load with ``load_checkpoint`` (safe, with named errors)."""
        return load_checkpoint(str(path))


def load_torch_file(uri: str, what: str = "checkpoint") -> Any:
    """Read a torch file (a checkpoint, a state dict of weights) from any URI with ``weights_only=True``.

    Raises:
        CheckpointError: missing or corrupt (truncated, not a torch file); the message names it.
        UnsafeCheckpointError: it would unpickle code (nothing ran); the message names it and says how to re-save.
    """
    fs, path = require_exists(uri, what)
    data = fs.cat_file(path)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Weights only load failed" in str(err) or "weights_only" in str(err):
            raise UnsafeCheckpointError(
                f"{what} '{uri}' would run code when loaded (it pickles objects beyond tensors and plain "
                "data), so Twinkle refuses it and nothing ran; re-save only the state_dict and plain values"
            ) from None
        raise CheckpointError(f"{what} '{uri}' is corrupt ({err}); use another file") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise CheckpointError(
            f"{what} '{uri}' is corrupt or not a PyTorch file ({type(err).__name__}: {err}); "
            "use another file, e.g. a run's last.ckpt"
        ) from None


def load_checkpoint(uri: str) -> dict[str, Any]:
    """Read a Lightning checkpoint from any URI with ``torch.load(weights_only=True)``.

    Raises:
        CheckpointError: missing or corrupt (truncated, not a torch file); the message names it.
        UnsafeCheckpointError: it would unpickle code; the message says how to re-save it.
    """
    checkpoint = load_torch_file(uri, "checkpoint")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"'{uri}' is not a Lightning checkpoint (no state_dict); pass a Twinkle run's checkpoint")
    return checkpoint
