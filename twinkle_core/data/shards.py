"""Sharded loading: samples streamed from an index file shard by shard, for data larger than memory.

A split (its sorted row numbers in an ``index file``) is cut into shards of
``shard_rows`` consecutive rows; reading a shard is one byte-range read per array through fsspec (local
disk, S3, ...), so memory holds one shard at a time, never the data. Each epoch:

* the shard order is a permutation seeded by ``(seed, epoch)`` (training; validation keeps the order);
* rank ``r`` of ``world`` takes shards ``r, r + world, ...`` of that order and loader worker ``w`` of ``W``
  every ``W``-th of those — each process reads only its own shards;
* rows inside a shard are shuffled by ``(seed, epoch, shard)``;
* training pads each (rank, worker) by repeating its own first samples up to the largest share, so every
  rank takes the same number of steps (as ``DistributedSampler`` pads); when the shards divide evenly,
  every sample is seen exactly once per epoch across all ranks.

The dataset's ``state_dict`` (epoch and samples yielded) is saved by torchdata's ``StatefulDataLoader`` in
every checkpoint; a resumed run skips whole shards to that position and goes on exactly.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from twinkle_core.data.index import index_header
from twinkle_core.parallel import data_rank_and_world, epoch_seed
from twinkle_core.uris import filesystem

DEFAULT_SHARD_ROWS = 4096
"""Rows per shard unless the processor says otherwise."""

RowDecoder = Callable[[dict[str, np.ndarray], int], Any]
"""Builds one sample from a shard's arrays and a row position in them (must be picklable for workers)."""


class ShardedRows(IterableDataset):
    """The rows ``rows`` of the index file ``uri``, streamed shard by shard (see the module docstring).

    Args:
        uri: the index file (any fsspec URI).
        rows: the split's row numbers in the index.
        arrays: the names of the index arrays each sample needs (``("features", "labels")``).
        decode: ``decode(shard_arrays, i)`` → one sample (``(input, target)``).
        seed: seeds the shard and row orders.
        shuffle: shuffle shards and rows each epoch (training) or keep the order (validation).
        pad: pad every (rank, worker) share to the largest, so all ranks take the same steps (training).
        shard_rows: rows per shard.
    """

    def __init__(self, uri: str, rows: np.ndarray, arrays: tuple[str, ...], decode: RowDecoder, *, seed: int = 0,
                 shuffle: bool = True, pad: bool = True, shard_rows: int = DEFAULT_SHARD_ROWS) -> None:
        """Cut ``rows`` into shards; nothing is read until iteration."""
        header, start = index_header(uri)
        missing = [a for a in arrays if a not in header["arrays"]]
        if missing:
            raise KeyError(f"index '{uri}' has no array {', '.join(missing)}")
        self.uri, self.arrays, self.decode, self.seed = uri, tuple(arrays), decode, seed
        self.shuffle, self.pad = shuffle, pad
        self.layout = {name: header["arrays"][name] for name in arrays}
        self.data_start = start
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        self.shards = [rows[i: i + shard_rows] for i in range(0, len(rows), max(int(shard_rows), 1))]
        self.epoch, self._skip = 0, 0
        self._yielded = 0

    # ----------------------------------------------------------- partitioning
    def _order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.shards)))
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
        return torch.randperm(len(self.shards), generator=generator).tolist()

    def _share(self, epoch: int, rank: int, world: int, worker: int, workers: int) -> list[int]:
        return self._order(epoch)[rank::world][worker::workers]

    def _target(self, epoch: int, world: int, workers: int) -> int:
        """The largest (rank, worker) share: every share is padded to it."""
        sizes = [sum(len(self.shards[s]) for s in self._share(epoch, r, world, w, workers))
                 for r in range(world) for w in range(workers)]
        return max(sizes, default=0)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (with padding; all ranks alike)."""
        rank, world = data_rank_and_world()
        if not self.pad:
            return sum(len(self.shards[s]) for s in self._order(0)[rank::world])
        workers = getattr(self, "_workers", 1)
        return self._target(0, world, workers) * workers

    # ---------------------------------------------------------------- reading
    def read_shard(self, index: int) -> dict[str, np.ndarray]:
        """The arrays of shard ``index`` at its rows (one byte-range read per array)."""
        rows = self.shards[index]
        first, last = int(rows[0]), int(rows[-1]) + 1
        fs, path = filesystem(self.uri)
        out = {}
        for name, entry in self.layout.items():
            dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
            row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
            begin = self.data_start + entry["offset"] + first * row_bytes
            raw = fs.cat_file(path, start=begin, end=begin + (last - first) * row_bytes)
            block = np.frombuffer(raw, dtype=dtype).reshape((last - first, *shape[1:]))
            out[name] = block[rows - first]
        return out

    def sample_arrays(self, max_rows: int = 65_536) -> dict[str, np.ndarray]:
        """The arrays of evenly spaced shards, up to about ``max_rows`` rows (for statistics such as a mean)."""
        if not self.shards:
            return {}
        per_shard = max(len(self.shards[0]), 1)
        count = max(1, min(len(self.shards), max_rows // per_shard))
        picked = np.unique(np.linspace(0, len(self.shards) - 1, count).round().astype(int))
        parts = [self.read_shard(int(i)) for i in picked]
        return {name: np.concatenate([p[name] for p in parts]) for name in self.arrays}

    def __iter__(self) -> Iterator[Any]:
        """This rank's and worker's samples of the current epoch (from the saved position after a resume)."""
        rank, world = data_rank_and_world()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, skip = self.epoch, self._skip
        share = self._share(epoch, rank, world, worker, workers)
        target = self._target(epoch, world, workers) if self.pad else None
        self._skip, self._yielded = 0, skip
        count = 0
        for shard in share:
            size = len(self.shards[shard])
            if count + size <= skip:  # already trained on before the resume: not even read
                count += size
                continue
            yield from self._shard_samples(epoch, shard, skip - count if count < skip else 0)
            count += size
        if target is not None and share:
            while count < target:  # pad with this share's own first samples
                for sample in self._shard_samples(epoch, share[0], 0):
                    if count >= target:
                        break
                    if count >= skip:
                        self._yielded += 1
                        yield sample
                    count += 1
        self.epoch, self._yielded = epoch + 1, 0

    def _shard_samples(self, epoch: int, shard: int, skip: int) -> Iterator[Any]:
        arrays = self.read_shard(shard)
        n = len(self.shards[shard])
        order = (torch.randperm(n, generator=torch.Generator().manual_seed(epoch_seed(self.seed, epoch, (shard + 1) * 104_729))).tolist()
                 if self.shuffle else range(n))
        for position, i in enumerate(order):
            if position < skip:
                continue
            self._yielded += 1
            yield self.decode(arrays, int(i))

    # -------------------------------------------------------------- resuming
    def state_dict(self) -> dict[str, int]:
        """The epoch and how many samples of it were yielded (saved by ``StatefulDataLoader``)."""
        return {"epoch": self.epoch, "yielded": self._yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue at a saved position: the next iteration skips what was yielded."""
        self.epoch, self._skip = int(state["epoch"]), int(state["yielded"])
        self._yielded = self._skip

    def set_workers(self, workers: int) -> None:
        """Tell the dataset how many loader workers will read it (for ``__len__``)."""
        self._workers = max(int(workers), 1)
