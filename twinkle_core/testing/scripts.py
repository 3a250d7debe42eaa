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
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

def run_script(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
               timeout: float | None = None, preload: Sequence[str] = (),
               new_session: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python *argv`` in a process forked from the warm template; wait for it and return its result.

    Args:
        argv: what follows ``python``: a script's path and its arguments, or ``"-m", MODULE, ...``.
        cwd: its working folder (default: this process's).
        env: its whole environment (default: this process's).
        timeout: seconds before it is killed (SIGKILL to its group); the result's ``returncode`` is then ``-9``
            and its ``stderr`` ends with a line saying so.
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
            signal_group(process.pid, signal.SIGKILL) if new_session else process.kill()
            process.join()
        stdout, stderr = (Path(path).read_text(errors="replace") if os.path.exists(path) else "" for path in (out, err))
    if timed_out:
        stderr += f"\n(killed: still running after {timeout} s)\n"
    return subprocess.CompletedProcess(["python", *argv], -signal.SIGKILL if timed_out else process.exitcode,
                                       stdout, stderr)


def _script_main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str, new_session: bool) -> None:
    """In the forked process: become ``python ARGV...`` in ``cwd`` with ``env``, output to ``out``/``err``."""
    import runpy
    import sys
    import traceback

    from twinkle_core.jobs.launcher import become_fresh, run_exit_handlers

    become_fresh(env, out, err, cwd=cwd, new_session=new_session)
    code: object = 0
    try:
        if argv[:1] == ["-m"]:
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path in sys.argv[0], as python -m does
            sys.path[0] = cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
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
