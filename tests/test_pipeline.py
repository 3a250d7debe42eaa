"""Pipeline parallel on CPU: ``tabular-mlp`` (an ``nn.Sequential``, cut evenly by default) in stages over 2
processes (torchrun through ``twinkle launch``, gloo; 1F1B inside Lightning), trains — its loss falls — and leaves
one finished run whose whole checkpoint exports."""

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
    """``strategy="pipeline"`` gives a stage per process: the network is cut into four parts, two per process
    (interleaved 1F1B; an epoch's short last batch runs GPipe-style), the loss falls, the validation accuracy reaches
    0.9, and the checkpoint rank 0 gathered from both stages exports to ONNX with the same accuracy."""
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
    assert run.plan["estimates"]["layout"]["layout"].startswith("dp 1 × tp 1 × pp 2")
    curves = pd.read_csv(os.path.join(RunStore(str(home)).run_dir(run.id), "logs", "metrics.csv"))
    losses = curves["train_loss_epoch"].dropna().tolist()
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0]  # the loss falls
    assert run.metrics["best_val_accuracy"] >= 0.9
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    exported = Trainer.from_checkpoint(run.uri, mode="finetune", verbose=False).export(format="onnx")
    assert exported.metric_export == pytest.approx(exported.metric_torch, abs=1e-6)


def test_a_pipeline_needs_one_process_per_stage(twinkle_home, cancer_csv) -> None:
    """``strategy="pipeline"`` in one process is refused by name before a run is created."""
    with pytest.raises(TwinkleError, match="one stage per process"):
        Trainer("tabular-mlp", hyperparams={"strategy": "pipeline", "max_epochs": 1}, verbose=False).fit(str(cancer_csv))
    assert RunStore().list() == []  # refused before a run was created
