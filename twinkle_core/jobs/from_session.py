"""A ``Session`` as a declarative ``Job``: what a supervisor, Ray Train's workers or ``twinkle launch`` rebuild the
training from in other processes — its ``TrainingSpec`` (names and values, never code), the data and the restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.spec import Job

if TYPE_CHECKING:
    from twinkle_core.session import Session


def job_of(session: Session, data: str | None, max_restarts: int, caller: str) -> Job:
    """``session`` as a job training ``data`` (default: its ``new_data``), restarted up to ``max_restarts`` times.

    Raises:
        TwinkleError: the session holds code another process cannot rebuild (an algorithm class, a configured
            processor, callbacks); ``caller`` names what asked.
    """
    spec = session.spec
    held = spec.held_code()
    if held:
        raise TwinkleError(f"{caller} runs the job in other processes from data only, but this trainer holds "
                           f"{', '.join(held)}; register the algorithm and pass names and hyperparameters, "
                           "or train in this process (backend='local')")
    # the job runs where it is sent: the workers train locally; the resolved hyperparameters, under current names
    hyperparams = {k: v for k, v in session.hyperparams.items() if k not in ("backend", "ray_workers")}
    return Job.from_spec(spec.replace(task=session.task, hyperparams=hyperparams, home=session.store.home),
                         session.data_uri(data), max_restarts)
