"""Job workers forked from a template that imported the Trainer once (``twinkle_core.jobs.launcher``) behave as
fresh ``python -m twinkle_core.jobs.child`` processes do: the same weights, the environment they were given,
their own process group, a checkpoint and exit status 143 on SIGTERM. (That a forked worker dies with the service
worker that started it is proved by ``test_serve_e2e.py``, which SIGKILLs a worker.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from twinkle_core import RunStore
from twinkle_core.jobs.launcher import start_child
from twinkle_core.jobs.spec import JOB_DIR_ENV, Job, read_json

HP = {"batch_size": 16, "seed": 3, "progress_bar": False}


def _start(tmp_path: Path, name: str, data: Path, epochs: int, fresh: bool = False, **extra: object):
    """A job of ``epochs`` on ``data`` in its own folder, started with a store named only by its environment."""
    folder, home = tmp_path / name, tmp_path / f"{name}-home"
    folder.mkdir()
    Job(algorithm="tabular-mlp", data=str(data), hyperparams={**HP, "max_epochs": epochs, **extra}, user="tester",
        project="launch").save(str(folder))
    env = {**os.environ, "TWINKLE_HOME": str(home), JOB_DIR_ENV: str(folder), "PYTHONUNBUFFERED": "1"}
    return folder, home, start_child(str(folder), env, log=str(folder / "log.txt"), fresh=fresh)


def test_a_forked_worker_trains_like_a_fresh_one_into_the_store_its_environment_names(tmp_path, cancer_csv) -> None:
    digests = {}
    for fresh in (False, True):
        folder, home, process = _start(tmp_path, f"fresh-{fresh}", cancer_csv, 2, fresh=fresh)
        log = folder / "log.txt"
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
        rank = json.loads((folder / "rank-0.json").read_text())
        # the run is in the store the job's environment named, not the one the template was started with
        assert RunStore(str(home)).get(rank["run"]).status == "finished"
        assert "Resource plan" in log.read_text()  # its output (the plan it printed) went to its log
        digests[fresh] = rank["weights_md5"]
    assert digests[False] == digests[True]


def test_a_forked_worker_has_its_own_group_and_stops_at_a_checkpoint_on_sigterm(tmp_path, cancer_csv) -> None:
    folder, home, process = _start(tmp_path, "long", cancer_csv, 500, checkpoint_every_n_steps=2)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.05)
    assert os.getpgid(process.pid) == process.pid  # a session and group of its own, like start_new_session
    deadline = time.monotonic() + 300
    while not list(home.glob("runs/**/last.ckpt")):  # it trains: stopping it now must save a step
        assert time.monotonic() < deadline and process.returncode is None, (folder / "log.txt").read_text()[-3000:]
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=120) == 143, (folder / "log.txt").read_text()[-3000:]
    stopped = read_json(str(folder), "stopped.json")
    assert stopped is not None and stopped["step"] > 0 and Path(stopped["checkpoint"]).exists()


def test_a_niced_job_in_a_session_of_its_own_stays_below_the_api() -> None:
    """A service job's training process runs in a session of its own, and Linux shares the CPU fairly between
    sessions (autogroups) whatever a process's niceness — two niced jobs halved the API's throughput. A process
    that starts its session as a job does (``become_fresh``) gives the session its niceness, so it still yields to
    the API's session (bench/service.py, reads while two jobs train)."""
    from twinkle_core.jobs.launcher import become_fresh

    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups: niceness alone already counts")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a service worker (niced) forking a job's training process
        try:
            os.close(read)
            os.nice(7)
            become_fresh(dict(os.environ), None, None)
            with open("/proc/self/autogroup", encoding="ascii") as handle:
                os.write(write, handle.read().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        group = answer.read()
    os.waitpid(pid, 0)
    assert group.strip().endswith("nice 7"), group


def test_a_process_may_fork_its_worker_only_with_one_thread_and_one_torch_thread() -> None:
    """``can_fork_here``: a fork copies one thread and no OpenMP pool, so a process with a second thread or torch
    on several intra-op threads starts fresh workers; with one of each it may fork (what ``twinkle train`` does)."""
    import sys

    script = """
import threading, torch
from twinkle_core.jobs.launcher import can_fork_here
seen = []
torch.set_num_threads(2); seen.append(can_fork_here())
torch.set_num_threads(1); seen.append(can_fork_here())
threading.Thread(target=threading.Event().wait, daemon=True).start(); seen.append(can_fork_here())
print(seen)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[False, True, False]"
