"""``supervise``: run a ``Job`` in a worker process and restart it from its last checkpoint when it dies.

The worker (``python -m twinkle_core.jobs.child JOB_DIR``, or a fork of the supervising process that becomes
what that command would be, see ``twinkle_core.jobs.launcher``) trains as ``Trainer.fit`` does and writes, into
the job folder, ``run.json`` as soon as its run exists and ``result.json`` when it ends. When the worker
dies — killed by a signal (SIGKILL, the OOM killer), or gone without leaving its run ``failed`` — the
supervisor records a ``restart`` event in the run's alerts and starts a new worker, which resumes the same run
(one id) exactly from its last checkpoint (the same data position and RNG state), or starts it again when no
checkpoint was written yet (a worker that died before creating its run starts the job again). An error the
training itself raised (bad data, a bug) is not retried: it would fail the same way. After ``max_restarts``
restarts the run ends ``failed`` with the last cause. What to do after each attempt is
``twinkle_core.jobs.restarts.FailurePolicy``'s decision, the same the service's workers take.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from twinkle_core.engine.result import FitResult
from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.folder import JobFolder, Outcome
from twinkle_core.jobs.launcher import can_fork_here, signal_group, start_child
from twinkle_core.jobs.restarts import FailureDecision, FailurePolicy, record_restart, resume_source
from twinkle_core.ops.alerts import AlertAction
from twinkle_core.jobs.spec import JOB_DIR_ENV, Job, job_dir
from twinkle_core.processes import EXIT_OK
from twinkle_core.store.catalogue import RunStatus
from twinkle_core.store.runs import RunStore


def supervise(job: Job, folder: str | None = None, verbose: bool = True, backoff_seconds: float = 1.0) -> FitResult:
    """Run ``job`` to its end in worker processes, restarting a dead worker up to ``job.max_restarts`` times.

    Args:
        job: what to train.
        folder: the job folder (default: a new one in the run store, see ``job_dir``).
        verbose: let the worker print its plan and progress.
        backoff_seconds: the wait before restart ``n`` is ``n × backoff_seconds``.

    Returns:
        The run's ``FitResult`` (one run, whatever the number of restarts).

    Raises:
        TwinkleError: the training raised an error (its message), or the worker kept dying — the run is then
            ``failed`` with the last cause, never left ``running``.
    """
    folder = folder or job_dir(job.home)
    files = JobFolder(folder)
    files.save_job(job)
    store = RunStore(job.home)
    policy = FailurePolicy(job.max_restarts)
    restarts = 0
    while True:
        outcome = Outcome.read(files, _attempt(files, restarts, verbose))
        record = store.get(outcome.run) if outcome.run else None
        decision = policy.decide(outcome, restarts, record.status if record is not None else None)
        if decision == FailureDecision.DONE:
            return FitResult.from_dict(outcome.result or {})
        if decision == FailureDecision.RAISE:
            raise TwinkleError(outcome.error_message)  # raised by the training: not retried
        cause = outcome.cause
        if decision == FailureDecision.GIVE_UP:
            message = f"the training process {cause}; gave up after {restarts} restart(s) (max_restarts)"
            if record is None:
                raise TwinkleError(f"{message}, each time before it created its run; see its output above")
            record_restart(store, record.uri, message, action=AlertAction.GIVE_UP, attempt=restarts)
            store.end_run(record.id, RunStatus.FAILED, message)
            raise TwinkleError(f"{record.uri}: {message}")
        restarts += 1
        what = "the job from the start (it had not created its run)"
        if record is not None:
            source = resume_source(store, record.uri)
            what = f"{record.uri} from {source}"
            record_restart(store, record.uri, f"the training process {cause}; restart {restarts} of "
                                              f"{job.max_restarts} from {source}", attempt=restarts,
                           returncode=outcome.returncode)
        if verbose:
            print(f"Twinkle: the training process {cause}; restarting {what} ({restarts}/{job.max_restarts})",
                  file=sys.stderr, flush=True)
        time.sleep(backoff_seconds * restarts)


def _attempt(files: JobFolder, attempt: int, verbose: bool) -> int:
    """Run one worker to its end; returns its exit status (negative: the signal that killed it)."""
    folder = files.path
    files.clear_outcome()  # what an earlier attempt ended with is not this one's
    env = {**os.environ, JOB_DIR_ENV: folder}
    # forked from this process when it may be (it imported the Trainer to check the job: a fresh interpreter would
    # import it all again), else a fresh one; either way its own session and process group, so the ranks
    # Lightning starts for a multi-device job go with it when it dies
    forked = can_fork_here()
    process = start_child(folder, env, quiet=not verbose, fresh=not forked, here=True)
    files.write(JobFolder.SUPERVISOR, {"supervisor_pid": os.getpid(), "worker_pid": process.pid, "attempt": attempt,
                                       "started": time.time(), "forked": forked})
    try:
        returncode = process.wait()
    except BaseException:  # the supervisor itself is stopped: stop the worker's group too, then say so
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
        raise
    if returncode != EXIT_OK:
        signal_group(process.pid, signal.SIGKILL)  # ranks left waiting on a dead rank 0
    return returncode
