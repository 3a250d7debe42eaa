"""A job's worker process: ``python -m twinkle_core.jobs.worker JOB_DIR`` (started by a supervisor or, on every
rank, by ``twinkle launch``/torchrun).

The first attempt trains the job as a new run; rank 0 writes ``run.json`` as soon as the run exists. A later
attempt (a supervisor's restart, or torchrun's ``--max-restarts``) finds ``run.json`` and resumes that same run
from its last checkpoint — or trains it again from the start when it has none. Rank 0 writes ``result.json``
at the end, ``error.json`` when training raised, or ``stopped.json`` when SIGTERM stopped it after a checkpoint
(:data:`~twinkle_core.processes.EXIT_STOPPED`, 143); :class:`~twinkle_core.jobs.folder.JobFolder` names them.
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from typing import Any

import torch

from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.folder import JobFolder
from twinkle_core.jobs.spec import JOB_DIR_ENV, Job
from twinkle_core.processes import EXIT_NAMED_ERROR, EXIT_OK, EXIT_STOPPED, inside_ray_worker


def run(folder: str) -> int:
    """Train the job in ``folder``; returns the process exit status."""
    from twinkle_core.engine.ranks import global_rank, is_global_zero
    from twinkle_core.engine.stopping import StoppedBySignal
    from twinkle_core.jobs.restarts import record_restart, resume_source
    from twinkle_core.store.runs import RunStore
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    os.environ[JOB_DIR_ENV] = folder
    files = JobFolder(folder)
    job = files.job()
    existing = files.run()
    try:
        options = {"data_processor": job.data_processor, "resource_strategy": job.resource_strategy,
                   "user": job.user, "project": job.project, "home": job.home}
        restarted_by = "ray" if inside_ray_worker() else \
            "torchrun" if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0 else None
        store = RunStore(job.home)
        if existing and restarted_by and is_global_zero():  # the launcher restarted the job's processes
            record_restart(store, existing, f"{restarted_by} restarted the job's processes after one died; "
                                            f"resuming from {resume_source(store, existing)}")
        trainer = _rules(Trainer(job.algorithm, job.task, job.hyperparams, **options), job)
        # a Ray driver hands the job to Ray Train's workers, which resume the job folder's run themselves
        if existing and store.last_checkpoint(store.get(existing).id) and not trainer._on_ray():  # noqa: SLF001
            trainer = _rules(Trainer.from_checkpoint(existing, mode="resume", same_run=True, home=job.home), job)
            result = trainer.fit()
        else:
            trainer.reuse_run = existing  # a restart before the first checkpoint: the same run, from the start
            result = trainer.fit(job.data)
    except StoppedBySignal as err:  # SIGTERM: stopped after saving a checkpoint, to be resumed
        if is_global_zero():
            files.write_stopped(err.step, err.checkpoint, str(err))
        return EXIT_STOPPED
    except Exception as err:  # noqa: BLE001 — reported to the supervisor; a bug also keeps its traceback
        if is_global_zero():
            files.write_error(type(err).__name__, str(err), traceback.format_exc())
        if isinstance(err, TwinkleError):  # a named error says what to fix: no traceback
            return EXIT_NAMED_ERROR
        raise
    if is_global_zero():
        files.write_result(result.to_dict())
    if trainer.algorithm is None:  # a Ray driver: its workers wrote what they ended with
        return EXIT_OK
    # every rank: what it ended with, so a job's ranks can be checked against each other
    files.write_rank(global_rank(), {"weights_md5": weights_digest(trainer.algorithm), "run": result.run_uri,
                                     "status": result.status})
    return EXIT_OK


def _rules(trainer: Any, job: Job) -> Any:
    """The job's monitor and budget rules, applied to ``trainer`` (every attempt)."""
    if job.monitor is not None:
        trainer.monitor(**job.monitor)
    if job.budget is not None:
        trainer.set_budget_alert(**job.budget)
    return trainer


def weights_digest(module: Any) -> str:
    """MD5 of a module's state (names, dtypes, shapes and bytes, in order): equal on ranks that agree."""
    digest = hashlib.md5()
    for name, tensor in (module.state_dict() if module is not None else {}).items():
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.view(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return digest.hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m twinkle_core.jobs.worker JOB_DIR")
    sys.exit(run(sys.argv[1]))
