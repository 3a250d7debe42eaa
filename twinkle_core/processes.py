"""What every layer agrees on about a job's processes: which launcher started them, the exit statuses a worker
process ends with, and how often a crashed job is restarted by default. Imports nothing (the CLI reads it at
start-up)."""

from __future__ import annotations

import os
import signal

LAUNCHER_ENV = "TWINKLE_LAUNCHER"
"""Set to ``ray`` in the processes Ray Train starts for a job (``twinkle_core.jobs.ray_backend``): their world
comes from Ray's context, not from torchrun's variables."""

DEFAULT_MAX_RESTARTS = 3
"""How many times a crashed job's processes are restarted from its last checkpoint unless told otherwise — by a
supervisor (``twinkle train --max-restarts``), torchrun (``twinkle launch``), Ray, or the service's workers."""

EXIT_OK = 0
"""The worker trained the job to its end (``result.json`` says how it ended)."""
EXIT_NAMED_ERROR = 1
"""The training raised a ``TwinkleError`` (``error.json``): fixing the input is the cure."""
EXIT_STOPPED = 128 + signal.SIGTERM
"""The worker stopped on SIGTERM after saving a checkpoint (``stopped.json``): it resumes from there."""


def inside_ray_worker() -> bool:
    """Whether this process is one of a job's Ray Train workers."""
    return os.environ.get(LAUNCHER_ENV) == "ray"


def describe_exit(returncode: int) -> str:
    """``"killed by signal 9 (SIGKILL)"`` or ``"exited with status 3"`` (``returncode`` as ``Popen`` gives it)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"
