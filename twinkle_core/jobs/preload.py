"""What the template that job workers are forked from imports once (see ``twinkle_core.jobs.launcher``): the
session and Lightning (with the collector paused, ``twinkle_core.imports``) and the training process's own module."""

from twinkle_core.imports import gc_paused
from twinkle_core.jobs import child  # noqa: F401 — imported for its side effect: the modules a job's training process needs

with gc_paused():
    from twinkle_core import session  # noqa: F401
