"""Ray Train as the scale-out engine: a local Ray cluster (2 CPUs, no dashboard) trains one run with 2
workers; a worker SIGKILLed mid-training is restarted by Ray and the run finishes from Twinkle's last
checkpoint by itself — one run id, a restart alert, nothing written outside the test's folders."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.jobs import RESTART_KIND


def _kill_worker_once(home: Path, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL Ray worker rank 1 once a mid-training checkpoint exists."""
    while not stop.is_set():
        for folder in (home / "jobs").glob("*") if (home / "jobs").exists() else []:
            pid_file, run_file = folder / "ray-worker-1.json", folder / "run.json"
            if not (pid_file.exists() and run_file.exists()):
                continue
            store = RunStore(str(home))
            last = Path(store.path(store.get(json.loads(run_file.read_text())["run"]).id, "checkpoints", "last.ckpt"))
            try:
                ready = last.exists() and torch.load(last, weights_only=True)["global_step"] >= 8
            except Exception:  # being written: try again
                ready = False
            if ready:
                pid = json.loads(pid_file.read_text())["pid"]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.05)


@pytest.mark.processes
def test_ray_workers_train_one_run_and_recover_from_a_killed_worker(tmp_path, cancer_csv, monkeypatch) -> None:
    import ray

    home = tmp_path / "home"
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ray_tmp = tempfile.mkdtemp(prefix="tr", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    real_home = Path.home()
    home_before = set(real_home.iterdir())
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # Ray keeps its auth token under ~/.ray: the test's own
    for name in ("RAY_CLIENT_MODE", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "PYTHONBREAKPOINT"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # ray.init sets these: give them back afterwards
        if not os.environ[name]:
            monkeypatch.delenv(name)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=ray_tmp,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester"}})
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_worker_once, args=(home, killed, stop), daemon=True)
    killer.start()
    try:
        hp = {"backend": "ray", "ray_workers": 2, "max_epochs": 10, "batch_size": 16, "checkpoint_every_n_steps": 4,
              "progress_bar": False, "max_restarts": 2}
        result = Trainer("tabular-mlp", hyperparams=hp, project="ray", verbose=False).fit(str(cancer_csv))
    finally:
        stop.set()
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert killed, "the worker was never killed"
    assert result.status == "finished"
    (run,) = RunStore(str(home)).list(project="ray")
    assert run.uri == result.run_uri and run.status == "finished"
    assert (run.plan["devices"] * run.plan["num_nodes"], run.plan["strategy"]) == (2, "ddp")
    restarts = [a for a in run.alerts if a["kind"] == RESTART_KIND]
    assert len(restarts) == 1 and "ray restarted the job's processes" in restarts[0]["message"]
    assert "from its last checkpoint" in restarts[0]["message"]
    assert set(real_home.iterdir()) == home_before  # no ~/ray_results, no ~/.ray outside the test's folders
    assert (tmp_path / "user" / ".ray").exists()
