"""Data loaders for the engine: resumable mid-epoch (torchdata's ``StatefulDataLoader``) and seeded.

The training order is a function of ``(seed, epoch)`` alone, and so are the worker processes' base seeds:
neither draws from the global random state nor depends on how many epochs this process has run. That is
what makes a resumed run (which starts mid-way) shuffle exactly like an uninterrupted one.

Under several processes each rank takes every ``world``-th index of that one order (the order padded by
wrapping around so every rank takes the same number of steps, as ``torch.utils.data.DistributedSampler``
does); validation splits the samples without padding, so reduced metrics cover the validation set exactly
once. The rank is read when an epoch starts (the process group exists by then, whatever launched it).
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from twinkle_core.errors import TwinkleError
from twinkle_core.parallel import data_rank_and_world, epoch_seed


class EpochShuffle(Sampler[int]):
    """A random permutation of ``range(n)`` seeded by ``(seed, epoch)``; Lightning calls ``set_epoch``.

    Its ``generator``, reseeded every epoch, is meant for the loader (worker base seeds). With ``repeats`` above 1,
    each rank's order is cut into chunks of ``chunk`` indices (one optimizer step's micro-batches) and each chunk is
    yielded ``repeats`` times in a row; an incomplete last chunk is left out (``Algorithm.updates_per_batch``).
    """

    def __init__(self, n: int, seed: int, repeats: int = 1, chunk: int = 1) -> None:
        """Shuffle ``n`` indices with ``seed``; ``repeats``, ``chunk``: see the class."""
        self.n, self.seed, self.epoch = n, seed, 0
        self.repeats, self.chunk = max(1, repeats), max(1, chunk)
        self.generator = torch.Generator()
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose permutation ``__iter__`` yields."""
        self.epoch = epoch
        self.generator.manual_seed(epoch_seed(self.seed, epoch, 0x9E3779B1))

    def permutation(self, epoch: int) -> list[int]:
        """This rank's share of the order of ``epoch`` (all of it in a single process)."""
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(epoch_seed(self.seed, epoch))).tolist()
        rank, world = data_rank_and_world()
        if world > 1:
            per_rank = -(-self.n // world)
            padded = (order * (-(-per_rank * world // max(self.n, 1))))[: per_rank * world]
            order = padded[rank::world]
        if self.repeats == 1:
            return order
        whole = len(order) // self.chunk * self.chunk
        return [i for start in range(0, whole, self.chunk) for _ in range(self.repeats)
                for i in order[start:start + self.chunk]]

    def __iter__(self) -> Iterator[int]:
        """This epoch's permutation, as an iterator whose position checkpoints save."""
        return _ShuffleIterator(self)

    def __len__(self) -> int:
        """The number of indices this rank yields per epoch."""
        world = data_rank_and_world()[1]
        per_rank = self.n if world == 1 else -(-self.n // world)
        return per_rank if self.repeats == 1 else per_rank // self.chunk * self.chunk * self.repeats


class RankSlice(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of ``range(n)`` in order, without padding (validation)."""

    def __init__(self, n: int) -> None:
        """Split ``range(n)`` between the ranks."""
        self.n = n

    def __iter__(self) -> Iterator[int]:
        """This rank's indices."""
        rank, world = data_rank_and_world()
        return iter(range(rank, self.n, world))

    def __len__(self) -> int:
        """How many indices this rank yields."""
        rank, world = data_rank_and_world()
        return len(range(rank, self.n, world))


class _ShuffleIterator(Iterator[int]):
    """One epoch's permutation; its ``state_dict`` (saved by ``StatefulDataLoader``) is epoch and position."""

    def __init__(self, sampler: EpochShuffle) -> None:
        # the order is drawn at the first index, not here: resuming at an epoch's end, Lightning makes the
        # next epoch's iterator before it sets the sampler's epoch (that run then repeated the last epoch's order)
        self.sampler, self.yielded = sampler, 0
        self.epoch: int | None = None
        self.order: list[int] = []

    def _start(self) -> None:
        if self.epoch is None:
            self.epoch = self.sampler.epoch
            self.order = self.sampler.permutation(self.epoch)

    def __next__(self) -> int:
        self._start()
        if self.yielded >= len(self.order):
            raise StopIteration
        self.yielded += 1
        return self.order[self.yielded - 1]

    def state_dict(self) -> dict[str, Any]:
        self._start()
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.yielded = int(state["epoch"]), int(state["yielded"])
        self.sampler.set_epoch(self.epoch)
        self.order = self.sampler.permutation(self.epoch)


def train_loader(dataset: Dataset, batch_size: int, seed: int, num_workers: int,
                 collate_fn: Any = None, repeats: int = 1, accumulate: int = 1) -> StatefulDataLoader:
    """A shuffling loader whose position is saved in checkpoints (see the module docstring).

    A streamed dataset (``ShardedRows``) shuffles and splits itself; its own
    state (epoch, samples yielded) is what checkpoints save. ``repeats`` above 1: each optimizer step's
    ``accumulate`` micro-batches come ``repeats`` times in a row (``Algorithm.updates_per_batch``; not for a
    streamed dataset).

    Raises:
        TwinkleError: ``repeats`` above 1 with a streamed dataset.
    """
    if isinstance(dataset, IterableDataset):
        if repeats > 1:
            raise TwinkleError(f"an algorithm that makes {repeats} updates per batch needs the data as a table of "
                               "rows, not streamed shards: prepare it without streaming")
        if hasattr(dataset, "set_workers"):
            dataset.set_workers(num_workers)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*'set_vital' is deprecated")
            return StatefulDataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                      persistent_workers=num_workers > 0, collate_fn=collate_fn)
    sampler = EpochShuffle(len(dataset), seed, repeats, batch_size * accumulate)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*'set_vital' is deprecated")  # torchdata's, harmless
        return StatefulDataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            generator=sampler.generator,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            collate_fn=collate_fn,
        )


def eval_loader(dataset: Dataset, batch_size: int, num_workers: int, collate_fn: Any = None) -> DataLoader:
    """A loader over ``dataset`` in order, for validation and prediction (each rank its own part)."""
    if isinstance(dataset, IterableDataset):  # streamed: it splits itself between the ranks
        return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_fn)
    return DataLoader(dataset, batch_size=batch_size, sampler=RankSlice(len(dataset)),  # type: ignore[arg-type]
                      num_workers=num_workers, persistent_workers=num_workers > 0, collate_fn=collate_fn)
