"""A job's training process: ``python -m twinkle_core.jobs.child JOB_DIR`` (started by a supervisor or, on every
rank, by ``twinkle launch``/torchrun).

The first attempt trains the job as a new run; rank 0 writes ``run.json`` as soon as the run exists. A later
attempt (a supervisor's restart, or torchrun's ``--max-restarts``) finds ``run.json`` and resumes that same run
from its last checkpoint — or trains it again from the start when it has none. Rank 0 writes ``result.json``
at the end, ``error.json`` when training raised, or ``stopped.json`` when SIGTERM stopped it after a checkpoint
(``EXIT_STOPPED``, 143); ``JobFolder`` names them.
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from typing import Any

import torch

from twinkle_core.errors import TwinkleError
from twinkle_core.imports import gc_paused
from twinkle_core.jobs.folder import JobFolder
from twinkle_core.jobs.spec import JOB_DIR_ENV
from twinkle_core.processes import EXIT_NAMED_ERROR, EXIT_OK, EXIT_STOPPED, LAUNCHER_ENV, inside_ray_worker


def run(folder: str) -> int:
    """Train the job in ``folder``; returns the process exit status."""
    from twinkle_core.engine.ranks import global_rank, is_global_zero
    from twinkle_core.engine.stopping import StoppedBySignal
    from twinkle_core.jobs.from_session import job_of
    from twinkle_core.jobs.ray_backend import check_not_continued_on_ray, goes_to_ray, run_on_ray
    from twinkle_core.jobs.restarts import record_restart, resume_source
    from twinkle_core.store.runs import RunStore

    with gc_paused():  # Lightning's 4,000 modules (twinkle_core.imports)
        from twinkle_core.session import Session

    os.environ[JOB_DIR_ENV] = folder
    files = JobFolder(folder)
    job = files.job()
    existing = files.run()
    try:
        spec = job.spec
        rules = {"monitor": spec.monitor, "budget": spec.budget}
        restarted_by = "ray" if inside_ray_worker() else \
            "torchrun" if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0 else None
        store = RunStore(job.home)
        if existing and restarted_by and is_global_zero():  # the launcher restarted the job's processes
            record_restart(store, existing, f"{restarted_by} restarted the job's processes after one died; "
                                            f"resuming from {resume_source(store, existing)}")
        session = Session.from_spec(spec)
        if goes_to_ray(session.settings):  # a Ray driver: Ray Train's workers resume the folder's run themselves
            check_not_continued_on_ray(spec.continues is not None)
            result = run_on_ray(job_of(session, job.data, session.settings.max_restarts, "backend='ray'"),
                                session.settings.ray_workers or 2, ray_train_loop)
        elif existing and store.last_checkpoint(store.get(existing).id):
            session = Session.from_checkpoint(existing, mode="resume", same_run=True, home=job.home, **rules)
            session.run_created = files.record_run
            result = session.fit()
        else:
            session.reuse_run = existing  # a restart before the first checkpoint: the same run, from the start
            session.run_created = files.record_run
            result = session.fit(job.data)
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
    if session.algorithm is None:  # a Ray driver: its workers wrote what they ended with
        return EXIT_OK
    # every rank: what it ended with, so a job's ranks can be checked against each other
    files.write_rank(global_rank(), {"weights_md5": weights_digest(session.algorithm), "run": result.run_uri,
                                     "status": result.status})
    return EXIT_OK


def ray_train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker (``run_on_ray``): set the ranks from Ray's context,
    then run the job in ``config["folder"]``."""
    import ray.train

    context = ray.train.get_context()
    env = {LAUNCHER_ENV: "ray", "WORLD_SIZE": str(context.get_world_size()), "RANK": str(context.get_world_rank()),
           "LOCAL_RANK": str(context.get_local_rank()), "LOCAL_WORLD_SIZE": str(context.get_local_world_size()),
           "NODE_RANK": str(context.get_node_rank()), JOB_DIR_ENV: config["folder"]}
    if config.get("home"):
        env["TWINKLE_HOME"] = config["home"]
    os.environ.update(env)
    JobFolder(config["folder"]).write(f"ray-worker-{context.get_world_rank()}.json",
                                      {"pid": os.getpid(), "rank": context.get_world_rank()})
    run(config["folder"])


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
        sys.exit("usage: python -m twinkle_core.jobs.child JOB_DIR")
    sys.exit(run(sys.argv[1]))
