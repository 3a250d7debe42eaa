"""What the template that job workers are forked from imports once (see :mod:`twinkle_core.jobs.launcher`): the
Trainer and Lightning (with the collector paused, :mod:`twinkle_core.imports`) and the worker's own module."""

from twinkle_core import Trainer  # noqa: F401 — imported for its side effect: the modules a worker needs
from twinkle_core.jobs import worker  # noqa: F401
