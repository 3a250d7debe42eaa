"""Starting a job's training process (``twinkle_core.jobs.child``) — forked from a warm template, or fresh.

A training process spends most of its start importing Lightning and what Lightning imports (about 4,000 modules,
10–15 s of CPU on a small machine) before it trains a step; a short job can spend more CPU starting than training.
``start_child`` by default forks each training process from a template process that imported the Trainer once
(Python's ``multiprocessing`` *forkserver*, one per launching process, started by ``warm_template`` or on
first use — the way Celery's prefork pool and gunicorn's ``--preload`` start workers), so it starts in well
under a second. The forked
process is set up as the fresh one would be: its own session and process group, the job's environment, its output
to the job's log, ``sys.argv`` and ``__main__`` as ``python -m twinkle_core.jobs.child FOLDER`` (Lightning starts
a multi-device job's other ranks from them), and optionally killed when the template goes away with its launcher.

``fresh=True`` (``twinkle serve --fresh-processes``) starts ``python -m twinkle_core.jobs.child FOLDER`` instead,
which sees code upgraded while the launcher runs. Either way the caller gets a ``ChildProcess`` with
``subprocess.Popen``'s ``pid``, ``returncode`` and ``wait()``.
"""

from __future__ import annotations

import atexit
import ctypes
import io
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, Protocol

CHILD_MODULE = "twinkle_core.jobs.child"
"""The module a job's training process runs (``python -m``)."""
PRELOAD = ["twinkle_core.jobs.preload"]
"""What the template imports once, before it forks training processes (the Trainer, with the collector paused)."""


class ChildProcess(Protocol):
    """What ``start_child`` returns: the part of ``subprocess.Popen`` a launcher uses."""

    pid: int
    returncode: int | None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to end and return its exit status (negative: the signal that killed it);
        raises ``subprocess.TimeoutExpired`` when it is still running after ``timeout`` seconds."""
        ...


class ForkedProcess:
    """A process forked from the template (a ``multiprocessing`` process) behind ``Popen``'s interface."""

    def __init__(self, process: Any, folder: str) -> None:
        """Wrap a started ``multiprocessing`` process that runs the job in ``folder`` (or, for a service worker,
        what it is named by)."""
        self.process, self.folder = process, folder
        self.pid: int = process.pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """See ``ChildProcess``."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired([CHILD_MODULE, self.folder], timeout or 0.0)
        self.returncode = self.process.exitcode
        return self.returncode

    def poll(self) -> int | None:
        """Its exit status if it has ended, else ``None`` (``Popen.poll``)."""
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to it unless it has ended (``Popen.send_signal``)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL it (``Popen.kill``)."""
        self.send_signal(signal.SIGKILL)


def start_child(folder: str, env: dict[str, str], log: str | None = None, die_with_parent: bool = False,
                fresh: bool = False, here: bool = False, quiet: bool = False) -> ChildProcess:
    """Start the training process of the job in ``folder``.

    Args:
        folder: the job folder.
        env: the worker's whole environment.
        log: a file its output is appended to (``None``: this process's own stdout and stderr).
        die_with_parent: the worker is killed (SIGKILL) when its parent goes away — the template, which ends with
            the launching process, or the launching process itself when ``fresh`` or ``here``.
        fresh: a new interpreter instead of a fork of the template.
        here: forked from this process, which must be one that may fork (``can_fork_here``) — a service worker
            (``twinkle_core.serve.worker``, itself forked from a template) or a supervisor that imported the
            Trainer to check the job: it already holds what a template would, so it starts no template of its own.
        quiet: without ``log``, the worker's standard output goes to ``/dev/null`` (its errors still show).
    """
    if fresh:
        out = open(log if log else os.devnull, "ab") if log or quiet else None  # noqa: SIM115 — the child holds it
        try:
            return subprocess.Popen([sys.executable, "-m", CHILD_MODULE, folder], env=env, stdout=out,
                                    stderr=subprocess.STDOUT if log else None, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    preexec_fn=_new_session_dying_with_parent if die_with_parent
                                    else keep_niceness_in_new_session)
        finally:
            if out:
                out.close()
    context = multiprocessing.get_context("fork") if here else template()
    stdout = log or (os.devnull if quiet else None)
    process = context.Process(target=_forked_main, args=(folder, env, stdout, log, die_with_parent), daemon=False,
                              name=f"twinkle-job-{os.path.basename(folder)}")
    process.start()
    return ForkedProcess(process, folder)


def can_fork_here() -> bool:
    """Whether this process may fork a worker of itself instead of starting a fresh interpreter: it runs one
    thread (a fork copies only the calling thread, and a lock another thread held would stay locked), has no
    CUDA context (a forked child cannot use its parent's), and torch, when imported, has one intra-op thread (an
    OpenMP thread pool does not survive a fork: the child's first parallel operation could hang). ``twinkle
    train`` keeps its supervising process so; a script or a notebook that calls ``Trainer.supervise`` after
    training or with threads of its own gets fresh workers."""
    if threading.active_count() != 1:
        return False
    torch = sys.modules.get("torch")
    return torch is None or (not torch.cuda.is_initialized() and torch.get_num_threads() == 1)


def warm_template() -> None:
    """Start this process's template now and wait until it has imported what workers need — otherwise the first
    ``start_child`` waits for that (10–15 s), e.g. while a job's lease runs."""
    process = template().Process(target=_ready, name="twinkle-template-ready")
    process.start()
    process.join()


def template(extra: Sequence[str] = ()) -> Any:
    """The ``multiprocessing`` context whose forkserver is this process's template: it imports ``PRELOAD``
    (and ``extra``) when it starts, on first use; afterwards ``extra`` changes nothing."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *extra])
    return context


def start_template() -> None:
    """Start this process's template now, without waiting for its imports and without a thread (so that this
    process may still fork cleanly afterwards): it imports ``PRELOAD`` on another core meanwhile."""
    from multiprocessing import forkserver

    template()
    forkserver.ensure_running()


def _ready() -> None:
    """Forked from the template by ``warm_template``: nothing to do."""


def die_with_parent_now(signum: int = signal.SIGKILL) -> None:
    """This process gets ``signum`` when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)
    except OSError:
        pass


def signal_when_gone(pid: int, signum: int = signal.SIGTERM) -> None:
    """This process gets ``signum`` when process ``pid`` ends — at once if it has ended already. What
    ``die_with_parent_now`` does for a parent, for a process that is not this one's parent (a service worker forked
    from its server's template watches the server): a daemon thread waits on a Linux pidfd; elsewhere nothing."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signum)
        return
    except (AttributeError, OSError):
        return

    def watch() -> None:
        select.select([handle], [], [])
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name=f"twinkle-watch-{pid}", daemon=True).start()


def signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to the process group ``pid`` leads (a worker and the ranks it started); gone is fine."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def keep_niceness_in_new_session() -> None:
    """In a process that has just started a session of its own (``setsid``): give the session's scheduling group the
    process's niceness. Linux puts each session in a group of its own (autogroup) and shares the CPU fairly between
    groups whatever their processes' niceness, so a niced training process in a session of its own would take as
    much CPU as the service's whole API (two jobs training halved its throughput); the group's niceness
    (``/proc/self/autogroup``, see sched(7)) is what counts between groups. Nothing happens where there is no
    autogroup or the process is not niced."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as handle:
            handle.write(str(niceness))
    except OSError:  # no autogroup (not Linux, or the kernel's scheduler has it off)
        pass


def _new_session_dying_with_parent() -> None:
    """A ``preexec_fn`` for ``Popen(start_new_session=True)``: keep the niceness, and die with the parent."""
    keep_niceness_in_new_session()
    die_with_parent_now()


def become_fresh(env: dict[str, str], stdout: str | None, stderr: str | None, cwd: str | None = None,
                 new_session: bool = True, die_with_parent: bool = False) -> None:
    """In a process forked from a template: set it up as ``python`` started with ``env`` in ``cwd`` would be.

    Its own session and process group (``new_session``), the environment replaced, stdin from ``/dev/null``,
    stdout/stderr appended to the given files (``None``: kept; the same file twice: one log), unbuffered text
    streams on them, ``multiprocessing``'s start method back to the platform's default (the template's
    forkserver would otherwise be inherited, and a ``DataLoader``'s workers could not start), and Python's
    faulthandler on where ``env`` sets ``PYTHONFAULTHANDLER``.
    """
    if new_session:
        os.setsid()
        keep_niceness_in_new_session()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what a fresh interpreter starts with, whatever the process it
    signal.signal(signal.SIGINT, signal.default_int_handler)  # was forked from had set (a service worker's stop)
    if die_with_parent:
        die_with_parent_now()
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    opened: dict[str, int] = {}
    for fd, path in ((1, stdout), (2, stderr)):
        if path is not None:
            if path not in opened:
                opened[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(opened[path], fd)
    for handle in opened.values():
        os.close(handle)
    # unbuffered, as PYTHONUNBUFFERED makes a fresh worker: its log is read while it runs
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    multiprocessing.set_start_method(None, force=True)
    if env.get("PYTHONFAULTHANDLER"):  # as a fresh interpreter reads it at start: stacks on SIGABRT, SIGSEGV, ...
        import faulthandler

        faulthandler.enable(file=sys.stderr)


def run_exit_handlers() -> None:
    """Run the ``atexit`` handlers and flush the streams, as the interpreter does at exit: a process forked by
    ``multiprocessing`` ends with ``os._exit``, which skips them (ray.init's shutdown of the local cluster it
    started, logging's flush)."""
    atexit._run_exitfuncs()  # noqa: SLF001 — CPython's own call at exit; no public alias exists
    sys.stdout.flush()
    sys.stderr.flush()


def _forked_main(folder: str, env: dict[str, str], stdout: str | None, stderr: str | None,
                 die_with_parent: bool) -> None:
    """The forked training process: become what ``python -m twinkle_core.jobs.child FOLDER`` would be, then run the job."""
    become_fresh(env, stdout, stderr, die_with_parent=die_with_parent)  # its own group: stopping the job stops its ranks
    from twinkle_core.jobs import child

    sys.argv = [str(child.__file__), folder]
    sys.modules["__main__"].__spec__ = child.__spec__  # Lightning starts a job's other ranks with -m from these
    try:
        code = child.run(folder)
    finally:
        run_exit_handlers()
    sys.exit(code)


RENAMED = {"WorkerProcess": "ChildProcess", "start_worker": "start_child", "ForkedWorker": "ForkedProcess",
           "WORKER_MODULE": "CHILD_MODULE"}
"""Old names of this module (old → new): "worker" now means a service worker only; a job's training process is
its child. Accepted for this release, with a ``DeprecationWarning``."""


def __getattr__(name: str) -> Any:
    """An old name (``RENAMED``): the new one's value, with a ``DeprecationWarning``."""
    if name in RENAMED:
        import warnings

        warnings.warn(f"twinkle_core.jobs.launcher.{name} is renamed {RENAMED[name]}", DeprecationWarning,
                      stacklevel=2)
        return globals()[RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
