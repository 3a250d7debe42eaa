"""Which process this is: every process of a job is a rank, and only global rank 0 writes or decides.

Twinkle does not launch processes itself; Lightning's launcher, torchrun, SLURM or Ray does. Before the
process group exists (when a run is created) the rank is read from the environment those launchers set;
once training runs, ``torch.distributed`` answers. Both agree: global rank 0 is node 0, local rank 0.
"""

from __future__ import annotations

import os
from typing import Any

from twinkle_core.parallel import process_group

_RANK_VARS = ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.lstrip("-").isdigit() else None


def global_rank() -> int:
    """This process's global rank: the process group's, else the launcher's environment, else 0."""
    group = process_group()
    if group is not None:
        return group[0]
    for name in _RANK_VARS:
        rank = _env_int(name)
        if rank is not None:
            return rank
    node, local = _env_int("NODE_RANK") or _env_int("GROUP_RANK") or 0, _env_int("LOCAL_RANK") or 0
    if node == 0:
        return local
    per_node = _env_int("LOCAL_WORLD_SIZE")
    return node * per_node + local if per_node else node * 1_000_000 + local  # any non-zero value is enough


def is_global_zero() -> bool:
    """Whether this process owns every write to the store, every print and every notification."""
    return global_rank() == 0


def world_size() -> int:
    """The number of processes in the job (1 before the process group exists and without a launcher)."""
    group = process_group()
    if group is not None:
        return group[1]
    return _env_int("WORLD_SIZE") or 1


def broadcast(value: Any, src: int = 0) -> Any:
    """``value`` of rank ``src`` on every rank (any picklable object); itself without a process group."""
    group = process_group()
    if group is None or group[1] == 1:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order (``[value]`` without a process group)."""
    group = process_group()
    if group is None or group[1] == 1:
        return [value]
    import torch.distributed as dist

    gathered: list[Any] = [None] * group[1]
    dist.all_gather_object(gathered, value)
    return gathered


def close_group() -> None:
    """End the job's process group on every rank together (a barrier, then ``destroy_process_group``).

    Left to interpreter exit, the ranks tear it down at different moments, and gloo's threads can abort the
    process ("terminate called without an active exception") after the run has finished. A later fit in the
    same process starts a new group.
    """
    group = process_group()
    if group is None or group[1] == 1:
        return
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def init_elastic_group(backend: str) -> bool:
    """Under torchrun, create the default process group on a store prefix of its own for this restart.

    torchrun keeps one rendezvous store for the whole job; a group restarted by ``--max-restarts`` that joins
    it again finds the keys of the attempt before and waits forever (measured with gloo). Each attempt
    therefore uses ``twinkle/attempt-<TORCHELASTIC_RESTART_COUNT>``. Returns whether it created the group
    (Lightning then uses it); outside torchrun, or when a group exists, it does nothing.
    """
    import datetime

    import torch.distributed as dist

    env = os.environ
    if dist.is_initialized() or not env.get("TORCHELASTIC_RUN_ID") or not env.get("MASTER_ADDR"):
        return False
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # the agent serves the store at MASTER_PORT
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, is_master=rank == 0 and not agent,
                          timeout=datetime.timedelta(minutes=10), multi_tenant=not agent)
    prefixed = dist.PrefixStore(f"twinkle/attempt-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world)
    return True
