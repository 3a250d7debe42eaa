"""Jobs and their runs on a caller's behalf: accept a submission, read a run's metric rows."""

from __future__ import annotations

from typing import Any

from twinkle_core.serve.config import check_data_uri, check_hyperparameter_uris
from twinkle_core.serve.deps import Service
from twinkle_core.serve.queue import JobRow
from twinkle_core.serve.run_files import metric_rows
from twinkle_core.serve.security import User
from twinkle_core.serve.submission import JobRequest, check_request


def accept(svc: Service, user: User, request: JobRequest, client: str | None, **audit: Any) -> JobRow:
    """Check a ``JobRequest`` as ``Trainer`` would (its data and every file-naming hyperparameter against the
    user's roots), queue it and audit it; returns the job. Nothing is queued or written when a check fails.

    Raises:
        DataAccessError: data or a hyperparameter outside what the user may read.
        QueueFullError: the user's queue is full.
        TwinkleError: an unknown algorithm, a bad hyperparameter, rule or budget.
    """
    data = check_data_uri(request.data, svc.config, user.name)
    check_hyperparameter_uris(request.trainer_hyperparams(), svc.config, user.name)
    check_request(request, svc.config.home, user.name)
    job = svc.queue.submit(user.name, request.model_copy(update={"data": data}).model_dump(mode="json"),
                           request.priority, svc.config.max_queued_per_user)
    svc.accounts.audit(user.name, "submit", job.id, client, algorithm=request.algorithm, data=data, **audit)
    return job


def run_metric_rows(svc: Service, run: str | None) -> list[dict[str, Any]]:
    """The metric rows of ``run`` (none before it exists)."""
    if not run:
        return []
    return metric_rows(svc.store.path(svc.store.run_id(run), "logs"))


__all__ = ["accept", "run_metric_rows"]
