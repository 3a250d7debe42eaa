"""What a Lightning trainer run inside this process (a fit, an evaluation, a prediction) would leave behind, put
back: its information lines hidden when not verbose (``quiet_lightning``), and the rendezvous variables a
distributed run sets restored afterwards (``distributed_environment_kept``)."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

_DISTRIBUTED_ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
                            "LOCAL_WORLD_SIZE")
_LIGHTNING_INFO = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                   "lightning.pytorch.accelerators.cuda", "lightning.fabric.utilities.distributed")


@contextlib.contextmanager
def quiet_lightning(verbose: bool) -> Iterator[None]:
    """Without ``verbose``, Lightning's information lines ("GPU available: ...") are hidden; warnings pass."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in _LIGHTNING_INFO]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@contextlib.contextmanager
def distributed_environment_kept() -> Iterator[None]:
    """The rendezvous variables as they were before: a distributed run inside this process (FSDP2 on one device,
    rank 0 of Lightning's launcher) sets them, and a later one must not take them for a launcher's."""
    before = {name: os.environ.get(name) for name in _DISTRIBUTED_ENVIRONMENT}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
