"""``run_script``: ``python SCRIPT ARGS...`` (or ``python -m MODULE ARGS...``) for a test, in a process of its own
that starts warm.

A test that trains in a separate process — to SIGKILL it and resume, to run a documentation page, to check what a
fresh process sees — pays 10–20 s of CPU importing Lightning before its first step. ``run_script`` forks the
process from a template that imported the Trainer once per test process (Python's ``multiprocessing``
forkserver), so only the script's own work is paid. The process is still separate: its own pid and, by default,
its own session and process group, its own working folder, environment, ``sys.argv`` and ``__main__``, its output
in files, and its exit status as ``python`` would give it (negative: the signal that killed it). Lightning's
launcher starts further ranks of a multi-device script from ``sys.argv`` as usual, in fresh interpreters.

What it cannot give is a fresh interpreter: modules the template imported are not imported again (so environment
variables read at import time by those modules keep the template's values), and a test of import-time behaviour
must start ``sys.executable`` itself.

``warm_commands`` does the same for console scripts that a shell runs (a documentation page's ``twinkle train ...``):
a folder of stand-ins to put first on ``PATH``; each run of one is forked from the template too, with the caller's
arguments, folder, environment, standard streams and signals, and its exit status.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

def run_script(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
               timeout: float | None = None, preload: Sequence[str] = (),
               new_session: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python *argv`` in a process forked from the warm template; wait for it and return its result.

    Args:
        argv: what follows ``python``: a script's path and its arguments, or ``"-m", MODULE, ...``.
        cwd: its working folder (default: this process's).
        env: its whole environment (default: this process's).
        timeout: seconds before it is killed: SIGABRT to its group first (a process with Python's faulthandler on
            — ``PYTHONFAULTHANDLER=1`` in ``env`` — writes every thread's stack to its stderr: where a hung job
            waits), SIGKILL 5 s later; the result's ``returncode`` is then ``-9`` and its ``stderr`` ends with a line
            saying so.
        preload: modules the template also imports — only when this is the first call of this process; later they
            are imported by each script as usual.
        new_session: its own session and process group (``start_new_session``), so a script can signal itself
            and the ranks it starts as one group.

    Returns:
        ``subprocess.CompletedProcess`` with ``args``, ``returncode``, ``stdout`` and ``stderr`` (text).
    """
    import tempfile

    from twinkle_core.jobs.launcher import signal_group, template

    context = template(preload)  # the job launcher's template: the Trainer and Lightning, imported once
    with tempfile.TemporaryDirectory(prefix="twinkle-script-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = context.Process(target=_script_main, args=(
            list(argv), str(cwd or os.getcwd()), dict(os.environ if env is None else env), out, err, new_session))
        process.start()
        process.join(timeout)
        timed_out = process.exitcode is None
        if timed_out:
            if new_session:
                signal_group(process.pid, signal.SIGABRT)  # faulthandler's stacks, where the script enabled it
                process.join(5)
                signal_group(process.pid, signal.SIGKILL)
            else:
                process.kill()
            process.join()
        stdout, stderr = (Path(path).read_text(errors="replace") if os.path.exists(path) else "" for path in (out, err))
    if timed_out:
        stderr += f"\n(killed: still running after {timeout} s)\n"
    return subprocess.CompletedProcess(["python", *argv], -signal.SIGKILL if timed_out else process.exitcode,
                                       stdout, stderr)


def _script_main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str, new_session: bool) -> None:
    """In the forked process: become ``python ARGV...`` in ``cwd`` with ``env``, output to ``out``/``err``."""
    import runpy

    from twinkle_core.jobs.launcher import become_fresh

    become_fresh(env, out, err, cwd=cwd, new_session=new_session)

    def main() -> object:
        if argv[:1] == ["-m"]:
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path in sys.argv[0], as python -m does
            sys.path[0] = cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        return 0

    _exit_as_python(main)


def _exit_as_python(main: object) -> None:
    """Call ``main()`` and end the process with the status ``python`` would give: ``SystemExit``'s code, 1 and a
    traceback for an exception; the ``atexit`` handlers run first."""
    import traceback

    from twinkle_core.jobs.launcher import run_exit_handlers

    code: object = 0
    try:
        code = main()  # type: ignore[operator]
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 — reported as python reports it: a traceback and status 1
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    run_exit_handlers()
    os._exit(int(code or 0))


STAND_IN = """#!{python} -S
# {name} as a stand-in (twinkle_core.testing.warm_commands): forked from a warm template, or the real one
import json, os, signal, socket, sys
REAL = {real!r}
try:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect({address!r})
except OSError:  # the template is gone: the real command
    os.execv(REAL, [REAL, *sys.argv[1:]])
payload = json.dumps({{"name": {name!r}, "argv": [REAL, *sys.argv[1:]], "cwd": os.getcwd(),
                      "env": dict(os.environ)}}).encode()
socket.send_fds(sock, [len(payload).to_bytes(8, "big")], [0, 1, 2])
sock.sendall(payload)
answers = sock.makefile("r")
pid = int(answers.readline())
def forward(signum, frame):
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, forward)
line = answers.readline()
code = int(line) if line.strip() else 1
if code < 0:  # killed by a signal: so is this process, as a shell would see it
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""
"""The stand-in executable: Python without ``site`` (about 20 ms), the standard library only."""


@contextlib.contextmanager
def warm_commands(commands: Sequence[str] | Mapping[str, Callable[[], object]] = ("twinkle",),
                  preload: Sequence[str] = ()) -> Iterator[Path]:
    """A folder of stand-ins for console scripts, each run of which is forked from the warm template (as
    ``run_script``'s scripts are) instead of starting a fresh interpreter; put the folder first on ``PATH``.

    A run gets the caller's arguments (``sys.argv[0]`` is the real script's path), working folder, environment and
    standard streams (the same file descriptors: a pipe stays a pipe), a session and process group of its own;
    SIGINT, SIGTERM and SIGHUP sent to the stand-in reach that group; the stand-in exits with the run's status (killed
    by a signal: by the same signal). A run whose stand-in is gone is killed with its group. What a run cannot
    get is what ``run_script``'s cannot: a fresh interpreter.

    Args:
        commands: the console scripts to stand in for, by name (default: ``twinkle``), each run as its installed
            entry point (``console_scripts``) runs it; or name → the function to run (code). The real script, run
            when the template is gone, is the one beside ``sys.executable``.
        preload: as ``run_script``'s (modules the template imports when this process first uses it).

    Yields:
        The folder of stand-ins, valid until the ``with`` block ends (then the template's server stops).
    """
    import shutil
    import tempfile

    from twinkle_core.jobs.launcher import template

    functions = dict(commands) if isinstance(commands, Mapping) else dict.fromkeys(commands)
    folder = Path(tempfile.mkdtemp(prefix="twinkle-commands-"))  # short: a socket's path has at most 107 bytes
    address = str(folder / "socket")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(16)
    # not a daemon: a daemon's children may not start processes (a run's `twinkle train` supervises a child)
    server = template(preload).Process(target=_serve_commands, args=(listener, functions, os.getpid()))
    try:
        server.start()
        listener.close()  # the server holds it now
        for name in functions:
            stand_in = folder / name
            stand_in.write_text(STAND_IN.format(python=sys.executable, name=name, address=address,
                                                real=str(Path(sys.executable).with_name(name))))
            stand_in.chmod(0o755)
        yield folder
    finally:
        listener.close()
        if server.pid is not None:
            server.kill()
            server.join()
        shutil.rmtree(folder, ignore_errors=True)


def _serve_commands(listener: socket.socket, functions: dict[str, Callable[[], object] | None], owner: int) -> None:
    """The template's server (single-threaded, so that it forks cleanly): one handler process per run, until the
    process that started it (``owner``) ends. A command given by name runs its installed console-script entry
    point (what its real script imports), resolved once here."""
    import selectors
    from importlib.metadata import entry_points

    for name, function in functions.items():
        if function is None:
            (point,) = entry_points(group="console_scripts", name=name)
            functions[name] = point.load()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped as they end
    waiting = selectors.DefaultSelector()
    waiting.register(listener, selectors.EVENT_READ)
    try:
        waiting.register(os.pidfd_open(owner), selectors.EVENT_READ)
    except ProcessLookupError:
        return
    while True:
        if any(key.fileobj is not listener for key, _ in waiting.select()):
            return  # the owner has ended
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            waiting.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _handle_command(connection, functions)
            finally:
                os._exit(0)
        connection.close()


def _handle_command(connection: socket.socket, functions: dict[str, object]) -> None:
    """A handler: read the stand-in's request and streams, fork the run, answer its pid, then its exit status —
    killing its group if the stand-in goes first (its connection closes)."""
    import selectors

    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
    size, payload = int.from_bytes(header, "big"), b""
    while len(payload) < size:
        chunk = connection.recv(size - len(payload))
        if not chunk:
            return
        payload += chunk
    request = json.loads(payload)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _run_command(request, fds, functions[request["name"]])
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    ended = os.pidfd_open(pid)
    with selectors.DefaultSelector() as waiting:
        waiting.register(ended, selectors.EVENT_READ)
        waiting.register(connection, selectors.EVENT_READ)
        if not any(key.fileobj is ended for key, _ in waiting.select()):  # the stand-in is gone
            from twinkle_core.jobs.launcher import signal_group

            signal_group(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _run_command(request: dict[str, object], fds: list[int], main: object) -> None:
    """The run: become the console script started by the stand-in, then call its function."""
    import io
    import multiprocessing

    from twinkle_core.jobs.launcher import die_with_parent_now

    os.setsid()
    die_with_parent_now()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    os.chdir(str(request["cwd"]))
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), line_buffering=os.isatty(fd),
                                  write_through=fd == 2, errors="backslashreplace" if fd == 2 else "strict")
        setattr(sys, name, stream)
    multiprocessing.set_start_method(None, force=True)
    sys.argv = list(request["argv"])  # type: ignore[call-overload]
    _exit_as_python(main)
