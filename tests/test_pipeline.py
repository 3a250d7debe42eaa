"""Pipeline parallel on CPU: ``tabular-mlp`` cut into 2 stages, one per process (torchrun through
``twinkle launch``, gloo), trains — its loss falls — and leaves one finished run whose checkpoint exports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pandas as pd
import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.errors import TwinkleError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.processes
def test_two_pipeline_stages_train_and_the_run_exports(tmp_path, cancer_csv, monkeypatch) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "TWINKLE_HOME": str(home), "TWINKLE_USER": "tester", "OMP_NUM_THREADS": "1"}
    job = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "launch", "tabular-mlp", "--data", str(cancer_csv), "--devices", "2",
         "--master-port", str(_free_port()), "--project", "pipe", "--run", "--json",
         *(f"--hp={k}={v}" for k, v in {"strategy": "pipeline", "max_epochs": 8, "batch_size": 32, "lr": 3e-3,
                                        "progress_bar": "false"}.items())],
        env=env, capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    (run,) = RunStore(str(home)).list(project="pipe")
    assert run.status == "finished" and run.plan["strategy"] == "pipeline" and run.measured["pipeline_stages"] == 2
    curves = pd.read_csv(os.path.join(RunStore(str(home)).run_dir(run.id), "logs", "metrics.csv"))
    losses = curves["train_loss"].tolist()
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0]  # the loss falls
    assert run.metrics["best_val_accuracy"] >= 0.9
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    exported = Trainer.from_checkpoint(run.uri, mode="finetune", verbose=False).export(format="onnx")
    assert exported.metric_export == pytest.approx(exported.metric_torch, abs=1e-6)


def test_a_pipeline_needs_one_process_per_stage(twinkle_home, cancer_csv) -> None:
    with pytest.raises(TwinkleError, match="one stage per process"):
        Trainer("tabular-mlp", hyperparams={"strategy": "pipeline", "max_epochs": 1}, verbose=False).fit(str(cancer_csv))
    assert RunStore().list() == []  # refused before a run was created
