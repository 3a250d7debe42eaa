"""The service from the command line, and how jobs end: ``twinkle users``, ``submit --wait``, ``jobs
list|show|logs|cancel`` against a live server; a job past its wall-clock limit ends ``stopped`` at a checkpoint; a
training process killed on its own is resumed; a job whose training raises fails with the named error, once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from twinkle_core import RunStore
from twinkle_core.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a server and its worker pool


def twinkle(home: Path, *args: str, server: str | None = None, token: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TWINKLE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.update({k: v for k, v in (("TWINKLE_SERVER", server), ("TWINKLE_TOKEN", token)) if v})
    result = subprocess.run([sys.executable, "-m", "twinkle_core", *args], env=env, capture_output=True, text=True,
                            timeout=600)
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def job_row(home: Path, job_id: str) -> sqlite3.Row:
    conn = sqlite3.connect(home / "serve" / "service.sqlite", timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    finally:
        conn.close()


def test_the_cli_and_every_way_a_job_ends(twinkle_service, cancer_csv: Path) -> None:
    home, data, _ = twinkle_service.home(cancer_csv)
    token = twinkle(home, "users", "add", "carol").stdout.strip()
    assert token.startswith("tw_")
    assert "already" not in twinkle(home, "users", "add", "dave", "--admin").stderr
    listed = twinkle(home, "users", "list").stdout
    assert "carol" in listed and "dave" in listed and token not in listed
    assert twinkle(home, "users", "add", "carol", check=False).returncode == 1
    port = twinkle_service.free_port()
    server = f"http://127.0.0.1:{port}"
    twinkle_service.start(home, port, "--workers", "2", "--lease", "5", "--grace", "20", "--poll", "0.2")

    done = twinkle(home, "submit", "tabular-mlp", "--data", data, "--epochs", "2", "--hp", "progress_bar=false",
                   "--wait", server=server, token=token)
    assert "finished" in done.stdout.splitlines()[-1] and "twinkle://carol/default/run1" in done.stdout
    assert "Trainable params" in done.stdout  # --wait followed the job's output live
    refused = twinkle(home, "submit", "tabular-mlp", "--data", "/etc/hosts", server=server, token=token, check=False)
    assert refused.returncode == 1 and "not under a data root" in refused.stderr and "403" in refused.stderr
    unknown = twinkle(home, "jobs", "list", server=server, token="tw_bad", check=False)
    assert unknown.returncode == 1 and "unknown token" in unknown.stderr

    client = Client(server, token)
    long = {"max_epochs": 5000, "batch_size": 16, "progress_bar": False, "checkpoint_every_n_steps": 10}
    timed = client.submit("tabular-mlp", data, long, wall_clock_limit=30)  # room to start on a busy machine
    crashed = client.submit("tabular-mlp", data, {**long, "max_epochs": 30})
    twinkle_service.wait_for(lambda: (r := job_row(home, crashed.id))["pid"] and r["run"] and
                             Path(RunStore(str(home)).path(r["run"].removeprefix("twinkle://"), "checkpoints",
                                                            "last.ckpt")).exists(), 180, "a checkpoint")
    os.killpg(job_row(home, crashed.id)["pid"], signal.SIGKILL)  # the training process alone, not its worker
    assert timed.wait(timeout=300) == "stopped"
    assert "wall-clock limit" in timed.data["reason"] and "checkpoint at step" in timed.data["reason"]
    run = RunStore(str(home)).get(timed.data["run"])
    assert run.status == "stopped" and RunStore(str(home)).last_checkpoint(run.id)  # resumable
    assert crashed.wait(timeout=300) == "finished"
    assert crashed.data["restarts"] == 1 and "killed by signal 9" in " ".join(
        t["reason"] or "" for t in crashed.data["transitions"])
    assert any(a["kind"] == "restart" for a in RunStore(str(home)).get(crashed.data["run"]).alerts)

    broken_data = home / "datasets" / "bad.csv"
    broken_data.write_text("a,b\n1,2\n")
    failed = client.submit("tabular-mlp", str(broken_data), {"max_epochs": 1})
    assert failed.wait(timeout=300) == "failed"  # the named error, raised by the training: not retried
    assert failed.data["attempts"] == 1 and failed.data["reason"].startswith("MissingColumnError: ")
    assert "Pass label_column=" in failed.data["reason"]

    listing = twinkle(home, "jobs", "list", server=server, token=token).stdout
    assert all(j in listing for j in (timed.id, crashed.id, failed.id)) and "stopped" in listing
    shown = json.loads(twinkle(home, "jobs", "show", crashed.id, server=server, token=token).stdout)
    assert shown["state"] == "finished" and [t["state"] for t in shown["transitions"]].count("running") == 2
    logs = twinkle(home, "jobs", "logs", crashed.id, server=server, token=token).stdout
    assert logs.count("--- attempt") == 2
    waiting = client.submit("tabular-mlp", data, long)
    cancelled = twinkle(home, "jobs", "cancel", waiting.id, server=server, token=token).stdout
    assert waiting.id in cancelled
    assert waiting.wait(timeout=300) == "cancelled"
    token2 = twinkle(home, "users", "token", "carol").stdout.strip()
    assert Client(server, token2).me()["name"] == "carol"
    twinkle(home, "users", "remove", "dave")
    assert "dave" not in twinkle(home, "users", "list").stdout
