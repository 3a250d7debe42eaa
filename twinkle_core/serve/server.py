"""``twinkle serve``: the API (uvicorn) in this process and in copies forked from it (``--api-processes``, one
socket), and a pool of local worker processes that it keeps at strength (a worker that dies is replaced).

Start-up order makes a restart lose nothing: take the server lock (one server per store), wait until every
worker of a previous server has let go of its job (they hold ``workers.lock`` shared; a server killed with
SIGKILL takes its workers with it, each stopping its job at a checkpoint first), put the jobs those workers
held back in the queue, then start new workers. On SIGTERM/SIGINT the API stops, then the workers stop their
jobs (SIGTERM, a checkpoint, back in the queue) and exit.

The workers are forked from one template process of the server's that imported the Trainer once
(``twinkle_core.jobs.launcher.template``), and each forks its jobs' training processes from itself: the pool
pays Lightning's import (10-15 s of CPU on a small machine) once, not once per worker, and a worker that dies is
replaced in well under a second. ``--fresh-processes`` starts new interpreters instead (they see upgraded code).
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from twinkle_core.errors import TwinkleError
from twinkle_core.jobs.launcher import ForkedProcess, die_with_parent_now, signal_group, start_template, template
from twinkle_core.processes import describe_exit
from twinkle_core.serve.config import ServerConfig
from twinkle_core.serve.queue import JobQueue
from twinkle_core.serve.strict_json import json_error_protocol
from twinkle_core.serve.worker import forked_main as worker_main


def default_workers() -> tuple[int, str]:
    """How many jobs this machine can run at once, and why: one per GPU; on CPUs, one per 4 cores and 8 GiB."""
    from twinkle_core.planning import Hardware

    hardware = Hardware.detect()
    if hardware.accelerator == "cuda" and hardware.devices:
        return hardware.devices, f"one worker per GPU ({hardware.devices} × {hardware.device_name})"
    by_memory = max(1, hardware.memory_bytes // (8 << 30))
    count = max(1, min(hardware.cpu_count // 4, by_memory))
    return count, (f"{hardware.cpu_count} CPU cores and {hardware.memory_bytes / (1 << 30):.0f} GiB: one job per "
                   "4 cores and 8 GiB")


class WorkerPool:
    """``count`` worker processes, replaced when one dies, stopped together.

    Each process has a name of its own (``w<slot>-<server pid>-<n>``: the slot it fills, the ``n``-th process
    started). When one dies, the pool stops the training processes of the jobs it held and puts those jobs back
    in the queue at once (the lease is the fallback for a worker nobody watches), then starts a replacement.
    """

    def __init__(self, config: ServerConfig, count: int, config_path: str) -> None:
        """Nothing starts before ``start``."""
        self.config, self.count, self.config_path = config, count, config_path
        self.processes: dict[str, subprocess.Popen[bytes] | ForkedProcess] = {}
        self.slots: dict[str, int] = {}
        self.queue = JobQueue(config.db_path, config.max_running_per_user)
        self._started = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpus = _gpu_count()

    def start(self) -> None:
        """Start the thread that starts the workers, then keeps them at strength (the first start waits for the
        template's imports: the API does not)."""
        self._thread = threading.Thread(target=self._keep, name="twinkle-workers", daemon=True)
        self._thread.start()

    def _spawn(self, index: int) -> None:
        self._started += 1
        name = f"w{index + 1}-{os.getpid()}-{self._started}"
        env = dict(os.environ)
        if self._gpus and self.count <= self._gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(index)  # one GPU per worker
        log = os.path.join(self.config.state_dir, f"worker-{index + 1}.log")
        if self.config.fresh_processes:
            with open(log, "ab") as out:
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "twinkle_core.serve.worker", self.config_path, name],
                    env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        else:  # forked from this server's template, which imported the Trainer once for every worker and job
            process = template().Process(target=worker_main, args=(self.config_path, name, env, log, os.getpid()),
                                         name=f"twinkle-worker-{name}", daemon=False)
            process.start()
            self.processes[name] = ForkedProcess(process, name)
        self.slots[name] = index

    def _keep(self) -> None:
        for index in range(self.count):
            if not self._stop.is_set():
                self._spawn(index)
        while not self._stop.wait(1.0):
            for name, process in list(self.processes.items()):
                if process.poll() is not None and not self._stop.is_set():
                    how = describe_exit(process.returncode)
                    sys.stderr.write(f"Twinkle: worker {name} exited ({how}); its jobs go back in the queue; "
                                     "starting another\n")
                    del self.processes[name]
                    self._requeue(name, how)
                    self._spawn(self.slots.pop(name))

    def _requeue(self, name: str, how: str) -> None:
        """Stop the training processes of the jobs worker ``name`` held, then queue the jobs again."""
        try:
            for job in self.queue.held_by(name):
                if job.pid:
                    signal_group(job.pid, signal.SIGKILL)  # it must not write beside the job's next attempt
            self.queue.worker_died(name, how)
        except Exception as err:  # noqa: BLE001 — the lease requeues them later; keep the pool at strength
            sys.stderr.write(f"Twinkle: could not requeue worker {name}'s jobs now ({err}); their leases will\n")

    def pids(self) -> dict[str, int]:
        """Worker name → process id."""
        return {name: p.pid for name, p in self.processes.items()}

    def stop(self) -> None:
        """SIGTERM every worker (each stops its job at a checkpoint and requeues it), wait, then SIGKILL."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)  # a worker being started is in self.processes once it has started
        stop_processes(list(self.processes.values()), self.config.grace_seconds + 15)


def stop_processes(processes: list[subprocess.Popen[bytes] | ForkedProcess], timeout: float) -> None:
    """SIGTERM each of ``processes`` still running, wait for them together up to ``timeout`` seconds, then
    SIGKILL what is left."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        return 0


def prepare(config: ServerConfig) -> tuple[Any, JobQueue]:
    """Take the server lock, wait for a previous server's workers, requeue what they held.

    Returns:
        The held lock file (keep it open while serving) and the queue.

    Raises:
        TwinkleError: another ``twinkle serve`` uses this store.
    """
    os.makedirs(config.state_dir, exist_ok=True)
    lock = open(os.path.join(config.state_dir, "server.lock"), "a+")  # noqa: SIM115 — held while serving
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise TwinkleError(f"another 'twinkle serve' is running on the store {config.home} (its lock: "
                           f"{os.path.join(config.state_dir, 'server.lock')}); stop it first") from None
    with open(os.path.join(config.state_dir, "workers.lock"), "a") as workers:
        deadline = time.monotonic() + config.grace_seconds + 30
        while True:  # the previous server's workers finish stopping their jobs first
            try:
                fcntl.flock(workers, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TwinkleError("workers of a previous server still hold their jobs; stop them "
                                       "(see 'twinkle jobs list') and start again") from None
                time.sleep(0.2)
        queue = JobQueue(config.db_path, config.max_running_per_user)
        for job in queue.recover("the server restarted while it ran; it resumes from its last checkpoint"):
            if job.pid:
                signal_group(job.pid, signal.SIGKILL)  # a training process that outlived its worker
        fcntl.flock(workers, fcntl.LOCK_UN)
    return lock, queue


def serve(config: ServerConfig, announce: Any = print) -> None:
    """Run the service until SIGTERM/SIGINT (see the module's description).

    The API is answered by ``config.api_process_count()`` processes accepting on one socket: this one and copies forked
    from it once the app is built (one Python process answers on one core at a time, and a busy list of jobs
    is CPU work). They share nothing but the socket and the store's SQLite files (WAL: readers never wait), hold
    neither lock, die with this process, and are stopped before the workers."""
    import uvicorn

    from twinkle_core.imports import import_heavy
    from twinkle_core.serve.app import create_app

    lock, _queue = prepare(config)
    count, why = (config.workers, "--workers") if config.workers is not None else default_workers()
    config_path = os.path.join(config.state_dir, "config.json")
    with open(config_path, "w", encoding="utf-8") as handle:
        handle.write(config.model_dump_json(indent=2))
    pool = WorkerPool(config, count, config_path)
    if count and not config.fresh_processes:
        start_template()  # the workers' template imports the Trainer meanwhile, on the other core
    api_children: list[ForkedProcess] = []
    try:
        # a submission is checked by resolving its spec (the algorithms' and processors' classes, Lightning under
        # them): import it now, before the first request, not during one (10-15 s of CPU on a small machine)
        import_heavy("twinkle_core.spec")
        _warm_submission_check(config)
        app = create_app(config)
        # what is loaded now lives as long as the server: out of the collector's sight, a full collection does not
        # walk its half a million objects (about 0.3 s on a small machine) in the middle of requests
        gc.freeze()
        settings = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                  timeout_graceful_shutdown=3, access_log=False, http=json_error_protocol())
        sock = settings.bind_socket()
        api_children = [_fork_api_process(settings, sock, lock) for _ in range(config.api_process_count() - 1)]
        pool.start()  # after the forks: this process has no other thread yet when it forks
        received: list[int] = []
        for signum in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the signal it shut down on: land here
            signal.signal(signum, lambda sig, frame: received.append(sig))
        announce(f"Twinkle serves http://{config.host}:{config.port}/ (API /api/v1, docs /docs; "
                 f"{len(api_children) + 1} API process(es)) with {count} worker(s) — {why}; "
                 f"auth {'on' if config.auth else 'off'}; store {config.home}")
        uvicorn.Server(settings).run(sockets=[sock])
    finally:
        stop_processes(api_children, 10.0)  # they finish the requests in flight
        announce("Twinkle: stopping the workers (running jobs save a checkpoint and go back to the queue)")
        pool.stop()
        lock.close()


def _warm_submission_check(config: ServerConfig) -> None:
    """Check one submission of a built-in algorithm now, before the API processes are forked: the first check in a
    process finds the plugins and builds their settings' models (about a second), which each forked copy would
    otherwise do again during its first submission. A failure here is not the server's: it is left to requests."""
    from twinkle_core.serve.submission import JobRequest, check_request

    try:
        check_request(JobRequest(algorithm="tabular-mlp", data="warm-up.csv"), config.home)
    except Exception:  # noqa: BLE001, S110 — a warm-up only
        pass


def _fork_api_process(settings: Any, sock: Any, lock: Any) -> ForkedProcess:
    """Fork a process that answers the API on ``sock`` until SIGTERM or this process's death."""
    import multiprocessing

    process = multiprocessing.get_context("fork").Process(target=_serve_api, args=(settings, sock, lock, os.getpid()),
                                                          name="twinkle-api", daemon=False)
    process.start()
    return ForkedProcess(process, "api")


def _serve_api(settings: Any, sock: Any, lock: Any, parent: int) -> None:
    """The forked API process: uvicorn on the server's socket."""
    import uvicorn

    die_with_parent_now(signal.SIGKILL)  # it holds no state: a server killed outright takes it along
    if os.getppid() != parent:
        return
    lock.close()  # the server lock is the server's: a restarted server must not wait for this copy
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)  # uvicorn installs its own, and re-raises the one it stopped on
    uvicorn.Server(settings).run(sockets=[sock])
