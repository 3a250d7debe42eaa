"""The tools the suite runs on: ``twinkle_core.testing.once`` makes shared work once per session even when two
pytest-xdist workers ask at the same moment, and the ``processes`` marker keeps multi-process tests on one xdist
worker, one after another."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from twinkle_core.testing import copy_of, once, run_script, warm_commands

ASK = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from twinkle_core.testing import once

    class Factory:  # what pytest's tmp_path_factory gives an xdist worker: its own base temp, under a shared one
        def getbasetemp(self):
            return Path(sys.argv[1]) / f"popen-{sys.argv[2]}"

    def make(folder):
        with open(Path(sys.argv[1]) / "made.log", "a") as log:
            log.write(sys.argv[2] + "\\n")
        time.sleep(1.0)  # long enough for the other worker to ask meanwhile
        (folder / "result.txt").write_text("made by " + sys.argv[2])

    print(once(Factory(), "shared", make))
''')


class _Factory:
    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def test_two_workers_asking_at_once_make_it_once_and_get_the_same_folder(tmp_path: Path) -> None:
    script = tmp_path / "ask.py"
    script.write_text(ASK)
    workers = [subprocess.Popen([sys.executable, str(script), str(tmp_path), name], stdout=subprocess.PIPE, text=True,
                                env={"PYTEST_XDIST_WORKER": name, "PATH": "/usr/bin:/bin"})
               for name in ("gw0", "gw1")]
    folders = {worker.communicate(timeout=120)[0].strip() for worker in workers}
    assert all(worker.returncode == 0 for worker in workers)
    (folder,) = folders  # both got the same folder ...
    assert len((tmp_path / "made.log").read_text().split()) == 1  # ... made once
    assert Path(folder, "result.txt").read_text().startswith("made by gw")


def test_a_failed_make_is_reported_to_whoever_asks_next(tmp_path: Path) -> None:
    def broken(folder: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        once(_Factory(tmp_path), "broken", broken)
    with pytest.raises(RuntimeError, match="(?s)making 'broken' failed earlier in this session.*disk full"):
        once(_Factory(tmp_path), "broken", lambda folder: None)  # not made again
    with pytest.raises(ValueError, match="not a folder name"):
        once(_Factory(tmp_path), "../escape", lambda folder: None)


def test_a_copy_leaves_the_shared_folder_as_it_was(tmp_path: Path) -> None:
    shared = once(_Factory(tmp_path), "run", lambda folder: (folder / "weights.txt").write_text("trained"))
    mine = copy_of(shared, tmp_path / "mine")
    (mine / "weights.txt").write_text("changed")
    assert (shared / "weights.txt").read_text() == "trained" and not list(mine.glob(".twinkle-once-*"))
    assert once(_Factory(tmp_path), "run", lambda folder: pytest.fail("made twice")) == shared


def test_processes_tests_share_one_xdist_worker(tmp_path: Path) -> None:
    """Under ``-n 2 --dist loadgroup`` the three ``processes`` tests, in two modules, run on one worker."""
    ran = "def ran(name): open(os.path.join(os.path.dirname(__file__), 'ran-' + name + '-' + " \
          "os.environ['PYTEST_XDIST_WORKER']), 'w').close()\n"
    (tmp_path / "test_a.py").write_text("import os, pytest\n" + ran + textwrap.dedent('''
        pytestmark = pytest.mark.processes
        def test_p1(): ran("p1")
        def test_p2(): ran("p2")
    '''))
    (tmp_path / "test_b.py").write_text("import os, time, pytest\n" + ran + textwrap.dedent('''
        def test_s1(): time.sleep(0.5)
        @pytest.mark.processes
        def test_p3(): ran("p3")
        def test_s2(): time.sleep(0.5)
    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                           "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    workers = dict(path.name.split("-")[1:] for path in tmp_path.glob("ran-*"))  # test -> the worker it ran on
    assert sorted(workers) == ["p1", "p2", "p3"] and len(set(workers.values())) == 1, workers
    assert done.stdout.count("@processes") >= 3  # xdist reports them with their group


SCRIPT = textwrap.dedent('''
    import os, signal, sys, time
    import __main__
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "probe", os.environ.get("PROBE"), "main", __main__.__file__)
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "exit":
        sys.exit(int(sys.argv[2]))
    if sys.argv[1] == "raise":
        raise ValueError("boom")
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[1] == "group":
        print("group", os.getpgid(0) == os.getpid())
    if sys.argv[1] == "sleep":
        time.sleep(60)
''')


def test_run_script_behaves_like_python_in_a_process_of_its_own(tmp_path: Path) -> None:
    """What a script run by ``run_script`` sees and reports equals ``python SCRIPT ARGS`` in a new session: its
    argv, folder, environment (replaced, not merged), ``__main__``, separate stdout/stderr, its exit status (a
    number, an uncaught exception, a signal) and its own process group; a timeout kills it."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PROBE": "given", "PATH": "/usr/bin:/bin"}
    done = run_script([str(script), "exit", "3"], cwd=work, env=env)
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert done.stdout == f"argv ['exit', '3'] cwd {work} probe given main {script}\n"
    raised = run_script([str(script), "raise"], env=env)
    assert raised.returncode == 1 and "ValueError: boom" in raised.stderr
    assert run_script([str(script), "kill"], env=env).returncode == -9
    assert "group True" in run_script([str(script), "group"], env=env).stdout
    slow = run_script([str(script), "sleep"], env=env, timeout=1)
    assert slow.returncode == -9 and "still running after 1 s" in slow.stderr
    module = run_script(["-m", "json.tool", "--help"], env=env)
    assert module.returncode == 0 and "usage:" in module.stdout


def test_a_warm_stand_in_runs_as_the_shell_would_and_its_run_dies_with_it(tmp_path: Path) -> None:
    """``warm_commands``: a stand-in on ``PATH`` (here for the standard library's ``code.interact`` console) gives
    its run the caller's arguments, folder, environment and standard input and output, and exits with the run's
    status; a stand-in killed with SIGKILL takes its run with it (the run's pid is gone)."""
    import code

    with warm_commands({"console": code.interact}) as commands:
        env = {**os.environ, "PATH": f"{commands}{os.pathsep}{os.environ['PATH']}", "PROBE": "given"}
        code = "import os, sys; print(os.getcwd(), os.environ['PROBE'], sys.argv[1:]); raise SystemExit(3)\n"
        done = subprocess.run(["console", "one", "two"], input=code, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 3 and done.stdout.endswith(f">>> {tmp_path} given ['one', 'two']\n"), done
        caller = subprocess.Popen(["console"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        caller.stdin.write("import os; print(os.getpid(), flush=True)\n")
        caller.stdin.flush()
        run = int(caller.stdout.readline().removeprefix(">>> "))  # after the console's prompt
        caller.kill()
        caller.wait()
        for _ in range(100):
            try:
                os.kill(run, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(run, signal.SIGKILL)
            raise AssertionError(f"the run {run} outlived its killed stand-in")


def test_the_journeys_run_the_longest_ready_task_first_and_tasks_may_add_tasks() -> None:
    """``tools/wheel_journeys.py``'s scheduler: on one slot the longest waiting task runs first; a task that adds
    another (a suite's share, once its venv is ready) has it run; ``run`` returns every result once all ended."""
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        from wheel_journeys import Scheduler
    finally:
        sys.path.pop(0)
    ran: list[str] = []
    lock = threading.Lock()

    def task(name: str, then: tuple[float, str] | None = None):  # noqa: ANN202
        def run() -> str:
            with lock:
                ran.append(name)
            if then:
                schedule.add(then[0], then[1], task(then[1]))
            return name.upper()
        return run

    schedule = Scheduler(1)
    for seconds, name, then in ((10, "short", None), (300, "long", (200, "share")), (100, "middle", None)):
        schedule.add(seconds, name, task(name, then))
    assert schedule.run() == {"long": "LONG", "share": "SHARE", "middle": "MIDDLE", "short": "SHORT"}
    assert ran == ["long", "share", "middle", "short"]
    two = Scheduler(2)
    for n in range(5):
        two.add(n, f"t{n}", task(f"t{n}"))
    assert sorted(two.run()) == [f"t{n}" for n in range(5)]


def test_a_journey_venv_takes_the_dev_venvs_bytecode_for_the_same_files_only(tmp_path: Path) -> None:
    """``share_bytecode``: a module whose source is the same file (hard-linked, as uv installs from its cache) in both
    sites gets the compiled site's ``.pyc``, which Python then uses as its own (the code's file name is the new
    site's, nothing is compiled again); a module whose source differs gets none and compiles as before."""
    import py_compile
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        from wheel_journeys import share_bytecode
    finally:
        sys.path.pop(0)
    dev, fresh = tmp_path / "dev", tmp_path / "fresh"
    for site in (dev, fresh):
        (site / "pkg").mkdir(parents=True)
    (dev / "pkg" / "same.py").write_text("def where():\n    return where.__code__.co_filename\n")
    os.link(dev / "pkg" / "same.py", fresh / "pkg" / "same.py")
    (dev / "pkg" / "other.py").write_text("VALUE = 1\n")
    (fresh / "pkg" / "other.py").write_text("VALUE = 2\n")
    for name in ("same", "other"):
        py_compile.compile(str(dev / "pkg" / f"{name}.py"), cfile=importlib.util.cache_from_source(
            str(dev / "pkg" / f"{name}.py")))
    assert share_bytecode(fresh, dev) == 1
    compiled = Path(importlib.util.cache_from_source(str(fresh / "pkg" / "same.py")))
    assert compiled.stat().st_ino == Path(importlib.util.cache_from_source(str(dev / "pkg" / "same.py"))).stat().st_ino
    assert not Path(importlib.util.cache_from_source(str(fresh / "pkg" / "other.py"))).exists()
    done = subprocess.run([sys.executable, "-B", "-c", "import pkg.same, pkg.other; "
                           "print(pkg.same.where(), pkg.same.__cached__, pkg.other.VALUE)"],
                          cwd=fresh, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(fresh)})
    where, cached, value = done.stdout.split()
    assert where == str(fresh / "pkg" / "same.py") and cached == str(compiled) and value == "2", done.stderr
    assert share_bytecode(fresh, dev) == 0  # already there: nothing linked twice
