"""What happens after an attempt of a job ends, decided once, and restarts recorded in the run.

``FailurePolicy.decide`` (Ray Train's ``FailurePolicy.make_decision`` in shape) turns how an attempt ended (an
``Outcome``) into one ``FailureDecision``: done, raise (the training raised: it would fail the same way again), restart
(the process died: the next attempt resumes the run from its last checkpoint) or give up (it died with no restarts
left). The supervisor (``twinkle train``, ``Trainer.supervise``) and the service's workers both ask it; a service
worker first settles what it stopped itself (a cancel, the wall clock, its shutdown).

Whoever restarts a job's processes — a supervisor, torchrun, Ray, the service's workers — notes it in the run's
alerts the same way (``kind`` ``RESTART_KIND``), so ``twinkle runs show`` and the dashboard list every restart and
its cause."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twinkle_core.jobs.folder import Outcome
from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind
from twinkle_core.ops.notify import run_notifier
from twinkle_core.store.catalogue import RunStatus
from twinkle_core.store.runs import RunStore
from twinkle_core.types import TextEnum


class FailureDecision(TextEnum):
    """What to do after an attempt ended (``FailurePolicy.decide``)."""

    DONE = "done"
    """The attempt trained to its end (or a rule of its own stopped it): its result is the job's."""
    RAISE = "raise"
    """The training raised an error: it would fail the same way again, so the job fails with it."""
    RESTART = "restart"
    """The process died (killed, or gone without a word): another attempt resumes the run."""
    GIVE_UP = "give up"
    """The process died and the job has no restarts left: the run ends ``failed`` with the cause."""


@dataclass(frozen=True)
class FailurePolicy:
    """The one rule for a job's attempts: restart a dead process up to ``max_restarts`` times, never retry an
    error the training raised."""

    max_restarts: int

    def decide(self, outcome: Outcome, restarts: int, run_status: RunStatus | str | None = None) -> FailureDecision:
        """The decision for ``outcome`` after ``restarts`` restarts so far. ``run_status``: the job's run's status
        now (``None``: no run yet). An error file beside a run still ``running`` was not written by a training
        that ended its run: the process is treated as dead."""
        if outcome.kind == "finished" and outcome.result is not None:
            return FailureDecision.DONE
        if outcome.kind == "raised" and (outcome.run is None or run_status in (None, RunStatus.FAILED)):
            return FailureDecision.RAISE
        return FailureDecision.GIVE_UP if restarts >= self.max_restarts else FailureDecision.RESTART

RESTART_KIND = AlertKind.RESTART
"""The ``kind`` of the alert recorded for each automatic restart (and for giving up)."""


def resume_source(store: RunStore, run: str) -> str:
    """Where a restart of ``run`` resumes from, in words: its last checkpoint, or the start when it has none."""
    return "its last checkpoint" if store.last_checkpoint(store.run_id(run)) else "the start (no checkpoint yet)"


def record_restart(store: RunStore, run: str, message: str, action: AlertAction | str = AlertAction.RESTART,
                   **details: Any) -> None:
    """Add a restart alert (``action``: ``restart`` or ``give up``; ``details``: ``attempt``, ``returncode``) to
    ``run`` (an id or URI), logged as every alert is."""
    record = store.get(run)
    run_notifier(store, record.id, record.uri, None)(Alert(RESTART_KIND, AlertAction(action), message,
                                                           details=details))


__all__ = ["FailureDecision", "FailurePolicy", "RESTART_KIND", "record_restart", "resume_source"]
