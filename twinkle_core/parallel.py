"""The job's process group as ``torch.distributed`` sees it, and seeds derived per epoch.

Shared by the engine (ranks, samplers) and the data layer (sharded datasets), which sits below the engine.

Ranks that split one model between them (tensor parallel) must read the same samples: the engine says how many
consecutive ranks form such a group (``model_parallel``), and the samplers split the data by ``data_rank_and_world``
— the group's index and the number of groups — instead of the plain rank and world size.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

_MODEL_PARALLEL_SIZE = 1
"""Consecutive ranks that hold one model between them (tensor-parallel degree) in the fit under way."""


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of an initialised ``torch.distributed`` group, else ``None``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks (``(0, 1)`` without a process group)."""
    return process_group() or (0, 1)


@contextlib.contextmanager
def model_parallel(size: int) -> Iterator[None]:
    """Within this block, every ``size`` consecutive ranks share one model (its tensor-parallel group) and read
    the same data: ``data_rank_and_world`` counts groups, not ranks."""
    global _MODEL_PARALLEL_SIZE
    before, _MODEL_PARALLEL_SIZE = _MODEL_PARALLEL_SIZE, max(int(size), 1)
    try:
        yield
    finally:
        _MODEL_PARALLEL_SIZE = before


def data_rank_and_world() -> tuple[int, int]:
    """``(replica, replicas)``: which data-parallel replica this rank belongs to and how many there are — the
    rank and world size, unless ranks share a model (``model_parallel``), whose group then counts as one."""
    rank, world = rank_and_world()
    size = _MODEL_PARALLEL_SIZE if world % _MODEL_PARALLEL_SIZE == 0 else 1
    return rank // size, world // size


def tied_names(module: Any) -> list[list[str]]:
    """Names of ``module``'s parameters that are one tensor (tied weights: an embedding and its output layer), in
    groups, each in ``named_parameters`` order (its first name is the one ``named_parameters`` keeps)."""
    groups: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def micro_batches(batch_size: int, stages: int) -> int:
    """Micro-batches per batch: the largest of 4·stages, …, 2, 1 that divides ``batch_size``."""
    for count in range(min(4 * stages, batch_size), 0, -1):
        if batch_size % count == 0:
            return count
    return 1


def pipeline_micro_batches(batch_size: int, ranks: int, per_rank: int = 1) -> tuple[int, bool]:
    """Micro-batches a pipeline of ``ranks`` devices, each running ``per_rank`` stages, splits a batch into, and
    whether they fill a 1F1B schedule: the most, up to 4 per rank, that divide ``batch_size`` into equal parts and
    number at least the ranks (a multiple of them when interleaved); else, for a batch too small for that, the most
    that divide it (run GPipe-style). Shared by the engine (``twinkle_core.pipelining``) and the planner's time
    estimate."""
    for count in range(min(4 * ranks, batch_size), ranks - 1, -1):
        if batch_size % count == 0 and (per_rank == 1 or count % ranks == 0):
            return count, True
    return micro_batches(batch_size, ranks), False


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """A seed that is a function of ``(seed, epoch, salt)`` alone: the same in every process and after a resume."""
    return (seed * 1_000_003 + epoch * 7_919 + salt) % (2**63)
