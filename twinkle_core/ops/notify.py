"""Delivering alerts (a log line, a record on the run, a JSON POST to a webhook) and stopping a run."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from typing import TYPE_CHECKING, Any, Callable

from twinkle_core.ops.alerts import Alert
from twinkle_core.store.runs import RunStore

if TYPE_CHECKING:  # run_notifier is used by supervisors and service workers, which never train themselves
    import lightning as L

log = logging.getLogger("twinkle.alerts")


def post_json(url: str, payload: dict[str, Any], timeout: float = 5.0) -> bool:
    """POST ``payload`` as JSON to ``url``; a failure is logged, never raised (training goes on)."""
    request = urllib.request.Request(
        url, data=json.dumps(payload, default=str).encode("utf-8"),
        headers={"Content-Type": "application/json", "User-Agent": "twinkle"}, method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the user's URL)
            return 200 <= response.status < 300
    except Exception as err:  # network trouble must not stop training
        log.warning("alert webhook %s failed: %s", url, err)
        return False


def run_notifier(store: RunStore, run_id: str, run_uri: str, webhook: str | None) -> Callable[[Alert], None]:
    """A function that logs an ``Alert``, appends it (as JSON, with the run and the time) to the run's
    ``alerts`` and posts it to ``webhook``."""

    def notify(alert: Alert) -> None:
        entry = {"run": run_uri, "time": time.time(), **alert.to_dict()}
        log.warning("ALERT %s: %s", run_uri, alert.message)
        if webhook:
            entry["webhook_delivered"] = post_json(webhook, entry)
        record = store.catalogue.get(run_id)
        store.update(run_id, alerts=[*(record.alerts if record else []), entry])

    return notify


def after_an_epochs_last_batch(trainer: Any) -> bool:
    """Whether training is between an epoch's last batch and that epoch's end (its validation, its scheduler
    step): a checkpoint saved there would not count the batch, and a resume would run it again."""
    epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    last_batch = bool(getattr(getattr(epoch_loop, "batch_progress", None), "is_last_batch", False))
    return last_batch and not getattr(trainer, "validating", False) and not getattr(trainer, "sanity_checking", False)


def stop_with_checkpoint(trainer: L.Trainer, path: str) -> None:
    """Save the exact current state to ``path`` (last.ckpt), then stop training.

    The run's own "last" checkpoint callbacks are switched off first: saving again when the loop winds down
    would record the interrupted epoch as complete, and a resume would skip the rest of it.

    After an epoch's last training batch nothing is saved here: the hook runs before Lightning counts that batch,
    so a resume would run it again. The epoch ends as usual and its own checkpoint (``path``, written by the
    "last" callbacks) is where the run resumes.
    """
    if after_an_epochs_last_batch(trainer):
        trainer.should_stop = True
        return
    trainer.save_checkpoint(path)
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "monitor", None) is None:  # the "last" ones; the best checkpoint stays
            callback.save_last = False
            callback.save_top_k = 0
    trainer.should_stop = True
