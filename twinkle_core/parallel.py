"""The job's process group as ``torch.distributed`` sees it, and seeds derived per epoch.

Shared by the engine (ranks, samplers) and the data layer (sharded datasets), which sits below the engine.
"""

from __future__ import annotations


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of an initialised ``torch.distributed`` group, else ``None``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks (``(0, 1)`` without a process group)."""
    return process_group() or (0, 1)


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """A seed that is a function of ``(seed, epoch, salt)`` alone: the same in every process and after a resume."""
    return (seed * 1_000_003 + epoch * 7_919 + salt) % (2**63)
