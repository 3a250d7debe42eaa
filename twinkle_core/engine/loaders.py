"""Data loaders for the engine: resumable mid-epoch (torchdata's ``StatefulDataLoader``) and seeded."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


def train_loader(dataset: Dataset, batch_size: int, seed: int, num_workers: int) -> StatefulDataLoader:
    """A shuffling loader whose order depends only on ``seed`` and whose position is saved in checkpoints.

    The shuffle uses its own generator, so it never draws from (or disturbs) the global random state.
    """
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )


def eval_loader(dataset: Dataset, batch_size: int, num_workers: int) -> DataLoader:
    """A loader over ``dataset`` in order, for validation and prediction."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                      persistent_workers=num_workers > 0)
