"""Jobs: training as declarative data (``Job``), run by a worker process under a supervisor that restarts
it from its last checkpoint when it dies (``supervise``), or by every rank of a torchrun launch."""

from twinkle_core.jobs.spec import Job, job_dir
from twinkle_core.jobs.restarts import RESTART_KIND
from twinkle_core.jobs.supervisor import supervise

__all__ = ["Job", "RESTART_KIND", "job_dir", "supervise"]
