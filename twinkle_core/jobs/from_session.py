"""A ``Session`` as a declarative ``Job``: what a supervisor, Ray
Train's workers or ``twinkle launch`` rebuild the training from in other processes — names and values, never code."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from twinkle_core.data.processor import DataProcessor
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
    held = [name for name, value in (("an Algorithm class", not isinstance(session.algorithm_ref, str)),
                                     ("a configured data processor", isinstance(session.data_processor, DataProcessor)),
                                     ("callbacks", bool(session.callbacks))) if value]
    if held:
        raise TwinkleError(f"{caller} runs the job in other processes from data only, but this trainer holds "
                           f"{', '.join(held)}; register the algorithm and pass names and hyperparameters, "
                           "or train in this process (backend='local')")
    hyperparams = {k: v for k, v in session.hyperparams.items() if k not in ("backend", "ray_workers")}
    return Job(algorithm=str(session.algorithm_ref), data=session.data_uri(data), task=session.task,
               hyperparams=hyperparams, data_processor=session.data_processor,  # type: ignore[arg-type]
               resource_strategy=session.resource_strategy, user=session.user, project=session.project,
               home=session.store.home, max_restarts=max_restarts,
               monitor=asdict(session.monitor_config) if session.monitor_config is not None else None,
               budget=asdict(session.budget_config) if session.budget_config is not None else None)
