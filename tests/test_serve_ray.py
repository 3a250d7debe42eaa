"""Scale-out from the queue: a server started with ``--ray-address`` hands a job submitted with
``resources.backend="ray"`` to Ray Train on that cluster — the queue and the run store stay Twinkle's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from twinkle_core import RunStore
from twinkle_core.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a server and its worker pool


def test_a_queued_job_trains_on_the_servers_ray_cluster(twinkle_service, cancer_csv: Path,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # Ray keeps its session files under ~/.ray: the test's own
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for name in [n for n in os.environ if n.startswith("RAY_")]:  # nothing of another Ray session leaks in
        monkeypatch.delenv(name)
    ray_tmp = tempfile.mkdtemp(prefix="tr", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    port = twinkle_service.free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    started = subprocess.run([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                              f"--temp-dir={ray_tmp}", "--disable-usage-stats"], capture_output=True, text=True,
                             timeout=180)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-3000:]
    try:
        home, data, tokens = twinkle_service.home(cancer_csv, "alice")
        server_port = twinkle_service.free_port()
        twinkle_service.start(home, server_port, "--workers", "1", "--poll", "0.2", "--ray-address",
                              f"127.0.0.1:{port}")
        client = Client(f"http://127.0.0.1:{server_port}", tokens["alice"])
        job = client.submit("tabular-mlp", data, {"max_epochs": 3, "batch_size": 16, "progress_bar": False},
                            resources={"backend": "ray", "ray_workers": 2}, project="ray")
        state = job.wait(timeout=600, poll=1.0)
        log = (home / "jobs" / job.id / "log.txt").read_text(errors="replace")
        assert state == "finished", job.data["reason"] + log[-3000:]
        runs = RunStore(str(home)).list(project="ray")
        assert len(runs) == 1 and runs[0].uri == job.result()["run"] and runs[0].status == "finished"
        workers = sorted(p.name for p in (home / "jobs" / job.id).glob("ray-worker-*.json"))
        assert workers == ["ray-worker-0.json", "ray-worker-1.json"]  # two Ray Train workers trained it
        ranks = [json.loads((home / "jobs" / job.id / f"rank-{r}.json").read_text()) for r in (0, 1)]
        assert ranks[0]["weights_md5"] == ranks[1]["weights_md5"]
        assert runs[0].metrics["val_accuracy"] > 0.85
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)
