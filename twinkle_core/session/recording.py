"""``RunRecorder``: the run a fit trains into, in the store — created with its plan, data record and data manifest,
or reopened when a restart or an exact resume trains into the run it already has. Rank 0 alone records (every
process is a rank; one run per job). The session hands it what it decided — the data, the plan, the hyperparameters,
the hardware's key — and never the session itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from twinkle_core.data.processor import PreparedData
from twinkle_core.engine.continuation import Continuation
from twinkle_core.engine.curves import keep_history
from twinkle_core.ops.verify import save_data_manifest
from twinkle_core.planning import Plan
from twinkle_core.store.catalogue import RunRecord
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import filesystem, join


@dataclass(frozen=True)
class RunRecorder:
    """Records the runs of one session's fits in ``store``, as ``user``'s in ``project``.

    Attributes:
        store: the run store.
        user, project: whose run and where (``None``: the store's defaults).
        created: called with the run's URI as soon as it exists or is reopened (a job's worker names it in
            ``run.json``).
    """

    store: RunStore
    user: str | None
    project: str | None
    created: Callable[[str], None] | None = None

    def record(self, uri: str, prepared: PreparedData, plan: Plan, *, algorithm: str, task: str,
               hyperparams: dict[str, Any], hardware: str, continuation: Continuation | None,
               reuse_run: str | None = None) -> RunRecord:
        """The run of this fit: reopened when it resumes its own run exactly (``continuation.same_run``) or a job
        restarted before its first checkpoint (``reuse_run``), created otherwise.

        Args:
            uri: the data's URI.
            prepared: what the processor made of it.
            plan: the fit's plan.
            algorithm, task: the registered algorithm and the task.
            hyperparams: every resolved hyperparameter (the algorithm's, the processor's, the trainer's).
            hardware: the machine's key (``Hardware.key``) when the plan does not name one.
            continuation: the checkpoint the fit continues, if any.
            reuse_run: a run to train into from the start.
        """
        same = continuation.parent_run if continuation is not None and continuation.same_run else None
        reopen = same or reuse_run
        if reopen:
            record = self.reopen(reopen, plan, continuation)
        else:
            record = self.create(uri, prepared, plan, algorithm=algorithm, task=task, hyperparams=hyperparams,
                                 hardware=hardware, continuation=continuation)
        if self.created is not None:
            self.created(record.uri)
        return record

    def reopen(self, run: str, plan: Plan, continuation: Continuation | None) -> RunRecord:
        """The run ``run``, running again: earlier metric rows kept up to the checkpoint ``continuation`` resumes
        (none when it restarts before any checkpoint), the new plan stored."""
        record = self.store.get(run)
        logs = self.store.path(record.id, "logs")
        if continuation is None:  # restarted before any checkpoint: nothing logged so far is kept
            fs, path = filesystem(join(logs, "metrics.csv"))
            if fs.exists(path):
                fs.rm(path)
        else:
            keep_history(logs, continuation.global_step)
        self.store.write_json(record.id, "plan.json", plan.to_dict())
        return self.store.update(record.id, status="running", error=None, finished=None, plan=plan.to_dict())

    def create(self, uri: str, prepared: PreparedData, plan: Plan, *, algorithm: str, task: str,
               hyperparams: dict[str, Any], hardware: str, continuation: Continuation | None) -> RunRecord:
        """A new run: its catalogue row, ``plan.json``, ``data.json`` and the data's manifest (what the run read,
        for ``twinkle verify``)."""
        parent = continuation.parent_run if continuation else None
        record = self.store.create_run(
            self.user,
            self.project,
            algorithm=algorithm,
            task=task,
            hyperparams=hyperparams,
            plan=plan.to_dict(),
            data_uri=uri,
            data_fingerprint=prepared.fingerprint,
            hardware=plan.estimates.get("hardware") or hardware,
            parent=self.store.run_id(parent) if parent else None,
            mode=continuation.mode if continuation else None,
        )
        self.store.write_json(record.id, "plan.json", plan.to_dict())
        save_data_manifest(self.store.home, uri, prepared)
        self.store.write_json(record.id, "data.json", {"uri": uri, "fingerprint": prepared.fingerprint,
                                                        "spec": prepared.spec.to_dict(), **prepared.details})
        return record


__all__ = ["RunRecorder"]
