"""Restarts recorded in the run: whoever restarts a job's processes — a supervisor, torchrun, Ray, the service's
workers — notes it in the run's alerts the same way (``kind`` ``RESTART_KIND``), so ``twinkle runs show`` and
the dashboard list every restart and its cause."""

from __future__ import annotations

from typing import Any

from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind
from twinkle_core.ops.notify import run_notifier
from twinkle_core.store.runs import RunStore

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
