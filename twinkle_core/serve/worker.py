"""A service worker: ``python -m twinkle_core.serve.worker CONFIG_JSON NAME``, or the same forked from the server's
template (how ``twinkle serve`` starts them unless ``--fresh-processes``).

It claims a job from the queue under a lease, runs it in a training process of its own process group (the job
folder's ``twinkle_core.jobs.child``, forked from a template that imported the Trainer once —
``twinkle_core.jobs.launcher`` — its output in the job's ``log.txt``), renews the lease while it runs
and, between beats, watches for a cancel request, the wall-clock limit and its own shutdown. The training
process dies with the worker (``PR_SET_PDEATHSIG``): a worker killed with SIGKILL leaves nothing running, and
its lease expiry hands the job to another worker, which resumes the same run from its last checkpoint.

Stopping a job (cancel, wall clock, server shutdown) is SIGTERM to its process group, the grace period, then
SIGKILL; within the grace the training saves a checkpoint at the next step and exits
(``StopOnSigterm``). A shutdown puts the job back in the queue, to resume.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from typing import Any

from twinkle_core.jobs.launcher import (
    ChildProcess,
    become_fresh,
    die_with_parent_now,
    run_exit_handlers,
    signal_group,
    signal_when_gone,
    start_child,
    warm_template,
)
from twinkle_core.jobs.folder import JobFolder, Outcome
from twinkle_core.jobs.restarts import FailureDecision, FailurePolicy, record_restart, resume_source
from twinkle_core.jobs.spec import JOB_DIR_ENV, job_dir
from twinkle_core.serve.config import ServerConfig
from twinkle_core.serve.queue import JobQueue, JobRow, JobState
from twinkle_core.serve.submission import JobRequest
from twinkle_core.store.catalogue import RunStatus
from twinkle_core.store.runs import RunStore


class Worker:
    """One worker process's loop (see the module's description)."""

    def __init__(self, config: ServerConfig, name: str, warm: bool = False) -> None:
        """Open the queue as worker ``name``; ``warm``: this process was forked from the server's template, and
        forks its jobs' training processes from itself."""
        self.config, self.name, self.warm = config, name, warm
        self.queue = JobQueue(config.db_path, config.max_running_per_user)
        self.stopping = False
        self.beat_every = max(0.2, min(config.lease_seconds / 3, config.poll_seconds))

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def loop(self) -> None:
        """Claim and run jobs until SIGTERM/SIGINT."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        if not self.config.fresh_processes and not self.warm:
            warm_template()  # before the first claim: a job's lease must not run while the template imports
        while not self.stopping:
            self.queue.worker_beat(self.name, None, os.getpid())
            job = self.queue.claim(self.name, self.config.lease_seconds)
            if job is None:
                _sleep(self.config.poll_seconds, lambda: self.stopping)
                continue
            try:
                self.run(job)
            except Exception as err:  # noqa: BLE001 — a job this worker cannot even start must not loop forever
                self.queue.release(job.id, self.name, JobState.FAILED, f"the worker could not run it: "
                                                                f"{type(err).__name__}: {err}")
        self.queue.worker_gone(self.name)

    # ------------------------------------------------------------------ one job
    def run(self, job: JobRow) -> None:
        """Run ``job`` (one attempt) to a final state, or back to the queue."""
        request = JobRequest.model_validate(job.request)
        files = JobFolder(job_dir(self.config.home, job.id))
        folder = files.path
        files.clear_outcome()
        files.save_job(request.to_job(job.user, self.config.home))
        run = files.run()
        if run and job.attempts > 1:
            self._restart_alert(run, job)
        limit = min(x for x in (request.wall_clock_limit, self.config.max_wall_clock_seconds, float("inf"))
                    if x is not None)
        started = time.time()
        log = os.path.join(folder, JobFolder.LOG)
        with open(log, "ab") as handle:
            handle.write(f"--- attempt {job.attempts} on {self.name} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n"
                         .encode())
        process = start_child(folder, self._env(folder, request), log=log, die_with_parent=True,
                               fresh=self.config.fresh_processes, here=self.warm and not self.config.fresh_processes)
        self.queue.set_process(job.id, self.name, process.pid)
        why = self._watch(job, process, limit - job.used_seconds, started, files, run)
        used = time.time() - started
        if why == "lost":
            return  # another worker holds the job now; this one changes nothing
        self._settle(job, Outcome.read(files, process.returncode), why, used, request)

    def _env(self, folder: str, request: JobRequest) -> dict[str, str]:
        env = {**os.environ, JOB_DIR_ENV: folder, "TWINKLE_HOME": self.config.home, "PYTHONUNBUFFERED": "1"}
        env.pop("RAY_ADDRESS", None)
        if self.config.ray_address and request.resources.backend == "ray":
            env["RAY_ADDRESS"] = self.config.ray_address
        return env

    def _watch(self, job: JobRow, process: ChildProcess, remaining: float, started: float, files: JobFolder,
               run: str | None) -> str | None:
        """Wait for the training process, renewing the lease; returns why it was stopped (``None``: it ended)."""
        why: str | None = None
        deadline: float | None = None
        while True:
            try:
                process.wait(timeout=self.beat_every)
                return why
            except subprocess.TimeoutExpired:
                pass
            if not self.queue.heartbeat(job.id, self.name, self.config.lease_seconds):
                signal_group(process.pid, signal.SIGKILL)
                process.wait()
                return "lost"
            self.queue.worker_beat(self.name, job.id)
            if run is None and (run := files.run()):
                self.queue.set_run(job.id, run)  # its live metrics can be found now
            if why is None:
                current = self.queue.get(job.id, transitions=False)
                if current is not None and current.cancel_requested:
                    why = "cancel"
                elif time.time() - started >= remaining:
                    why = "wall-clock"
                elif self.stopping:
                    why = "shutdown"
                if why is not None:
                    signal_group(process.pid, signal.SIGTERM)
                    deadline = time.time() + self.config.grace_seconds
            elif deadline is not None and time.time() >= deadline:
                signal_group(process.pid, signal.SIGKILL)
                deadline = None

    def _settle(self, job: JobRow, outcome: Outcome, why: str | None, used: float, request: JobRequest) -> None:
        """Record how the attempt ended: a final state, or queued again to resume. What this worker stopped itself
        (``why``: a cancel, the wall clock, its shutdown) is settled here; the rest is the ``FailurePolicy``'s
        decision, the same the supervisor takes."""
        result, run = outcome.result, outcome.run
        store = RunStore(self.config.home)
        record = store.get(run) if run and why is None else None
        decision = FailurePolicy(request.max_restarts).decide(outcome, job.restarts,
                                                              record.status if record is not None else None)
        saved = f" (a checkpoint at step {outcome.stopped['step']})" if outcome.stopped else \
            f" (no checkpoint: killed after the {self.config.grace_seconds:g} s grace)" \
            if outcome.returncode == -signal.SIGKILL \
            else " (its last checkpoint is kept)" if _has_checkpoint(store, run) \
            else " (before its first step: nothing to save)"
        if decision == FailureDecision.DONE and result is not None:
            state = JobState.STOPPED if result.get("status") == "stopped" else JobState.FINISHED
            reason = result.get("stop_reason") or f"the run {result['run_uri']} finished"
            self._release(job, state, reason, used, result, run)
        elif why == "cancel":
            current = self.queue.get(job.id, transitions=False)
            _end_run(store, run, RunStatus.STOPPED, f"cancelled by {current.cancel_requested if current else '?'}")
            self._release(job, JobState.CANCELLED,
                          f"cancelled by {current.cancel_requested if current else '?'}{saved}", used, None, run)
        elif why == "wall-clock":
            message = f"its wall-clock limit was reached{saved}; resume it with 'twinkle resume {run}'"
            _end_run(store, run, RunStatus.STOPPED, message)
            self._release(job, JobState.STOPPED, message, used, None, run)
        elif why == "shutdown":
            self._release(job, JobState.QUEUED, f"the server stopped{saved}; it resumes when a worker is free", used,
                          None, run)
        elif decision == FailureDecision.RAISE:  # the training raised: it would fail the same way again
            message = outcome.error_message
            _end_run(store, run, RunStatus.FAILED, message)
            self._release(job, JobState.FAILED, message, used, {"error": outcome.error}, run)
        elif decision == FailureDecision.GIVE_UP:
            message = f"the training process {outcome.cause}; gave up after {job.restarts} restart(s)"
            _end_run(store, run, RunStatus.FAILED, message)
            self._release(job, JobState.FAILED, message, used, None, run)
        else:  # FailureDecision.RESTART
            self._release(job, JobState.QUEUED, f"the training process {outcome.cause}; it resumes from its last "
                                                f"checkpoint", used, None, run, crashed=True)

    def _release(self, job: JobRow, state: JobState, reason: str, used: float, result: dict[str, Any] | None,
                 run: str | None, crashed: bool = False) -> None:
        self.queue.release(job.id, self.name, state, reason, used_seconds=used, result=result, run=run,
                           crashed=crashed)

    def _restart_alert(self, run: str, job: JobRow) -> None:
        """Record in the run why this attempt resumes it (the job's last transition back to the queue)."""
        store = RunStore(self.config.home)
        back = next((t for t in reversed(self.queue.get(job.id).transitions) if t["state"] == "queued"), None)  # type: ignore[union-attr]
        record_restart(store, run, f"{back['reason'] if back else 'requeued'} — attempt {job.attempts} on {self.name} "
                                   f"resumes from {resume_source(store, run)}", attempt=job.attempts)


def _end_run(store: RunStore, run: str | None, status: RunStatus, message: str) -> None:
    """Never leave a run ``running`` when its job has ended."""
    if run:
        store.end_run(store.run_id(run), status, message, only_running=True)


def _sleep(seconds: float, stop: Any) -> None:
    """Sleep ``seconds``, waking early once ``stop()`` is true."""
    end = time.monotonic() + seconds
    while not stop() and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


def main(argv: list[str]) -> int:
    """Entry point: ``CONFIG_JSON NAME``."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m twinkle_core.serve.worker CONFIG_JSON NAME\n")
        return 2
    return work(argv[0], argv[1])


def work(config_path: str, name: str, server: int | None = None) -> int:
    """Be service worker ``name`` of the server whose configuration is at ``config_path`` until told to stop;
    ``server``: the server's process id when this process was forked from its template (not its child)."""
    with open(config_path, encoding="utf-8") as handle:
        config = ServerConfig.model_validate_json(handle.read())
    if server is None:
        die_with_parent_now(signal.SIGTERM)  # a worker does not outlive its server
    else:
        signal_when_gone(server, signal.SIGTERM)  # its parent is the template, which lives as long as its forks
    os.nice(config.training_nice)  # its training (forked from here) inherits it: the API keeps a core's worth
    with open(os.path.join(config.state_dir, "workers.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # a new server waits until every old worker has let go of its job
        Worker(config, name, warm=server is not None).loop()
    return 0


def forked_main(config_path: str, name: str, env: dict[str, str], log: str, server: int) -> None:
    """A service worker forked from the server's template (``WorkerPool``): set up as ``python -m
    twinkle_core.serve.worker CONFIG_JSON NAME`` started with ``env`` would be (in the server's process group, its
    output appended to ``log``), then work until told to stop or until the server (process ``server``) is gone; its
    jobs' training processes are forked from it."""
    become_fresh(env, log, log, new_session=False)
    try:
        code = work(config_path, name, server=server)
    finally:
        run_exit_handlers()
    sys.exit(code)


def _has_checkpoint(store: Any, run: str | None) -> bool:
    """Whether the run ``run`` has a last checkpoint to resume from."""
    if not run:
        return False
    try:
        return os.path.exists(store.path(store.get(run).id, "checkpoints", "last.ckpt"))
    except Exception:  # noqa: BLE001 — no such run: nothing to resume
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
