"""Two torchrun "nodes" on loopback (2 × 1 process, c10d rendezvous) started from ``twinkle launch``'s command:
one finished run in the store, whichever node became rank 0, and the same final weights on both ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from twinkle_core import RunStore


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.processes
def test_two_torchrun_nodes_make_one_run_with_equal_weights(tmp_path, cancer_csv) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester", "OMP_NUM_THREADS": "1"}
    printed = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "launch", "tabular-mlp", "--data", str(cancer_csv), "--nodes", "2",
         "--devices", "1", "--master-port", str(_free_port()), "--project", "nodes", "--json",
         "--hp", "max_epochs=3", "--hp", "batch_size=32", "--hp", "progress_bar=false"],
        env=env, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-3000:]
    launch = json.loads(printed.stdout)
    assert "torch.distributed.run" in launch["command"] and "--nnodes=2" in launch["command"]
    nodes = [subprocess.Popen(launch["command"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for _ in range(2)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    folder = Path(launch["folder"])
    result = json.loads((folder / "result.json").read_text())
    ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert result["status"] == "finished" and ranks[0]["weights_md5"] == ranks[1]["weights_md5"]
    (run,) = RunStore(str(home)).list(project="nodes")
    assert run.uri == result["run_uri"] == ranks[1]["run"] and run.status == "finished"
    plan = run.plan
    assert (plan["num_nodes"], plan["devices"], plan["strategy"]) == (2, 1, "ddp")
    reasons = {d["name"]: d["reason"] for d in plan["decisions"]}
    assert reasons["num_nodes"] == "torchrun: 2 node(s)"


@pytest.mark.processes
def test_torchrun_restarts_a_killed_rank_and_the_run_resumes(tmp_path, cancer_csv) -> None:
    """``--max-restarts``: SIGKILL one rank mid-training; torchrun restarts the group, which resumes the same run."""
    import signal
    import time

    import torch

    home = tmp_path / "home"
    env = {**os.environ, "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester", "OMP_NUM_THREADS": "1"}
    printed = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "launch", "tabular-mlp", "--data", str(cancer_csv), "--devices", "2",
         "--master-port", str(_free_port()), "--project", "elastic", "--json", "--max-restarts", "2",
         *(f"--hp={k}={v}" for k, v in {"max_epochs": 12, "batch_size": 16, "checkpoint_every_n_steps": 4,
                                        "progress_bar": "false"}.items())],
        env=env, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-3000:]
    launch = json.loads(printed.stdout)
    job = subprocess.Popen(launch["command"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    folder, store = Path(launch["folder"]), RunStore(str(home))
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and job.poll() is None:
        if (folder / "run.json").exists():
            last = Path(store.path(store.get(json.loads((folder / "run.json").read_text())["run"]).id, "checkpoints",
                                   "last.ckpt"))
            try:
                if last.exists() and torch.load(last, weights_only=True)["global_step"] >= 8:
                    workers = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True,
                                             text=True).stdout.split()  # torchrun's agent's children: the ranks
                    victim = int(workers[-1])
                    os.kill(victim, signal.SIGKILL)
            except (RuntimeError, EOFError, IndexError, ValueError):
                pass  # a checkpoint being written, or the workers not listed yet
        time.sleep(0.05)
    try:
        output = job.communicate(timeout=300)[0]
    finally:
        if job.poll() is None:  # a hung group: do not leave it behind
            os.killpg(job.pid, signal.SIGKILL)
    assert victim is not None, output[-3000:]
    assert job.returncode == 0, output[-4000:]
    (run,) = store.list(project="elastic")
    assert run.status == "finished"
    restarts = [a for a in run.alerts if a["kind"] == "restart"]
    assert len(restarts) == 1 and "torchrun restarted the job's processes" in restarts[0]["message"]
    ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_md5"] == ranks[1]["weights_md5"]


def test_nodes_without_a_launcher_are_a_named_error(twinkle_home, cancer_csv) -> None:
    from click.testing import CliRunner

    from twinkle_core.cli import main

    result = CliRunner().invoke(main, ["train", "tabular-mlp", "--data", str(cancer_csv), "--nodes", "2",
                                       "--devices", "1", "--epochs", "1", "--max-restarts", "0"])
    assert result.exit_code == 1 and "num_nodes=2 needs the processes of every node started together" in result.output
    assert "Traceback" not in result.output and RunStore().list() == []
