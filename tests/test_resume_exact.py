"""A run killed with SIGKILL mid-epoch and resumed ends with the same weights as one never interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore

SCRIPT = textwrap.dedent(
    '''
    import sys
    from twinkle_core import Trainer
    from twinkle_core.testing import KillAtStep

    mode, data = sys.argv[1], sys.argv[2]
    hp = {"batch_size": 32, "max_epochs": 3, "checkpoint_every_n_steps": 4, "dropout": 0.3, "scheduler": "cosine",
          "progress_bar": False}
    if mode == "resume":
        result = Trainer.from_checkpoint(sys.argv[3], mode="resume", verbose=False).fit()
    else:
        callbacks = [KillAtStep(int(sys.argv[3]))] if mode == "kill" else []
        result = Trainer("tabular-mlp", hyperparams=hp, project=mode, verbose=False, callbacks=callbacks).fit(data)
    print("RUN", result.run_uri, result.last_checkpoint)
    '''
)


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _last_line(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line.startswith("RUN ")][-1].split()


def test_sigkill_mid_epoch_then_resume_is_bit_identical(twinkle_home, cancer_csv, tmp_path) -> None:
    """With a schedule that counts the run's steps (cosine: Lightning builds the training loader to count them),
    the resumed run still carries on from the checkpoint's place in the epoch, and the resumed epoch's
    train_loss_epoch is the uninterrupted run's."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # 455 training rows / 32 = 15 steps per epoch; checkpoints every 4 steps; killed at step 22 (epoch 1,
    # batch 7), so steps 21–22 are redone after the resume from the step-20 checkpoint.
    _, full_uri, full_ckpt = _last_line(_run(script, "full", str(cancer_csv)))
    killed = _run(script, "kill", str(cancer_csv), "22")
    assert killed.returncode == -signal.SIGKILL
    store = RunStore()
    (victim,) = store.list(project="kill")
    assert victim.status == "running"  # nothing could mark it
    partial = torch.load(store.path(victim.id, "checkpoints", "last.ckpt"), weights_only=True)
    assert partial["global_step"] == 20 and partial["epoch"] == 1
    _, resumed_uri, resumed_ckpt = _last_line(_run(script, "resume", str(cancer_csv), victim.uri))
    full = torch.load(full_ckpt, weights_only=True)
    resumed = torch.load(resumed_ckpt, weights_only=True)
    assert full["global_step"] == resumed["global_step"] == 45
    assert full["state_dict"].keys() == resumed["state_dict"].keys()
    for key, value in full["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    for a, b in zip(full["optimizer_states"][0]["state"].values(), resumed["optimizer_states"][0]["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"])
    child = store.get(resumed_uri)
    import pandas as pd

    def epoch_losses(uri: str) -> dict[int, float]:  # each epoch's train_loss_epoch in the run's metrics.csv
        rows = pd.read_csv(store.path(store.get(uri).id, "logs", "metrics.csv"))
        rows = rows.dropna(subset=["train_loss_epoch"])
        return dict(zip(rows["epoch"].astype(int), rows["train_loss_epoch"]))

    # the resumed epoch's loss is over all of its batches, those before the kill included (issue 53: it was over
    # the batches after the resume only)
    assert epoch_losses(resumed_uri)[1] == pytest.approx(epoch_losses(full_uri)[1], rel=1e-6)
    assert child.parent == victim.id and child.mode == "resume" and child.status == "finished"
    assert store.get(victim.uri).status == "interrupted"
    assert resumed_uri.startswith("twinkle://tester/kill/")


def test_resuming_from_an_epoch_end_checkpoint_is_bit_identical(twinkle_home, cancer_csv, tmp_path) -> None:
    """The checkpoint written at a validation's end (between epochs) resumes exactly too: the next epoch keeps
    its own data order (Lightning makes its iterator before it sets the sampler's epoch; the order once came
    from the epoch before)."""
    import shutil

    import lightning as L

    from twinkle_core import Trainer
    from twinkle_core.jobs.child import weights_digest

    hp = {"max_epochs": 3, "batch_size": 16, "checkpoint_every_n_steps": 4, "seed": 3, "progress_bar": False}
    kept: dict[int, str] = {}

    class KeepEpochEnds(L.Callback):
        def on_train_epoch_start(self, trainer, module) -> None:  # noqa: ANN001
            last = RunStore().path(RunStore().list()[0].id, "checkpoints", "last.ckpt") if RunStore().list() else None
            if last and trainer.current_epoch in (1, 2):
                kept[trainer.current_epoch] = str(shutil.copy(last, tmp_path / f"epoch-{trainer.current_epoch}.ckpt"))

    uninterrupted = Trainer("tabular-mlp", hyperparams=hp, verbose=False, callbacks=[KeepEpochEnds()])
    uninterrupted.fit(str(cancer_csv))
    assert sorted(kept) == [1, 2]
    for epoch, path in kept.items():
        assert torch.load(path, weights_only=True)["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"][
            "completed"] == 29  # written after the epoch's validation, not mid-epoch
        resumed = Trainer.from_checkpoint(path, mode="resume", verbose=False)
        resumed.fit()
        assert weights_digest(resumed.algorithm) == weights_digest(uninterrupted.algorithm), f"from epoch {epoch}"


def test_a_stop_asked_on_an_epochs_last_batch_resumes_exactly(twinkle_home, cancer_csv) -> None:
    """SIGTERM during an epoch's last batch (the service's 20-job test met it under load: a job stopped there
    resumed to other weights). ``StopOnSigterm`` used to save there before Lightning counted the batch as done,
    and the resume ran the batch again; now Lightning stops the run itself, its own checkpoint of that step
    counting the batch, and the run resumes to the same weights as a run never stopped (the old save fails
    this)."""
    import lightning as L

    from twinkle_core import Trainer
    from twinkle_core.engine.stopping import StoppedBySignal
    from twinkle_core.jobs.child import weights_digest

    hp = {"max_epochs": 3, "batch_size": 16, "checkpoint_every_n_steps": 4, "seed": 3, "progress_bar": False}

    class SigtermOnTheLastBatch(L.Callback):  # a real SIGTERM, caught by Lightning's own handler
        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:  # noqa: ANN001
            if trainer.current_epoch == 1 and batch_idx == trainer.num_training_batches - 1:
                os.kill(os.getpid(), signal.SIGTERM)

    uninterrupted = Trainer("tabular-mlp", hyperparams=hp, verbose=False)
    uninterrupted.fit(str(cancer_csv))
    stopped = Trainer("tabular-mlp", hyperparams=hp, verbose=False, callbacks=[SigtermOnTheLastBatch()])
    with pytest.raises(StoppedBySignal) as info:
        stopped.fit(str(cancer_csv))
    assert info.value.step == 58  # 29 steps an epoch: stopped at the epoch's last step
    (run,) = [r for r in RunStore().list() if r.status == "stopped"]
    resumed = Trainer.from_checkpoint(run.uri, mode="resume", verbose=False)
    resumed.fit()
    assert weights_digest(resumed.algorithm) == weights_digest(uninterrupted.algorithm)


def test_a_rule_stop_on_an_epochs_last_batch_resumes_exactly(twinkle_home, cancer_csv) -> None:
    """A budget or alert-rule stop (``stop_with_checkpoint``) asked after an epoch's last batch — the budget test
    met it when the CPU budget ran out there, and its resume ended an epoch short — saves nothing at that point:
    the epoch ends, its own checkpoint is the resume point, and the resumed run ends on the uninterrupted run's
    step and weights."""
    import lightning as L

    from twinkle_core import Trainer
    from twinkle_core.jobs.child import weights_digest
    from twinkle_core.ops.notify import stop_with_checkpoint

    hp = {"max_epochs": 3, "batch_size": 16, "seed": 3, "progress_bar": False}

    class StopOnTheLastBatch(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
            if trainer.current_epoch == 1 and batch_idx == trainer.num_training_batches - 1:
                (run,) = RunStore().list(project="rule")
                stop_with_checkpoint(trainer, RunStore().path(run.id, "checkpoints", "last.ckpt"))

    uninterrupted = Trainer("tabular-mlp", hyperparams=hp, verbose=False)
    uninterrupted.fit(str(cancer_csv))
    stopped = Trainer("tabular-mlp", hyperparams=hp, project="rule", verbose=False, callbacks=[StopOnTheLastBatch()])
    result = stopped.fit(str(cancer_csv))
    assert torch.load(result.last_checkpoint, weights_only=True)["global_step"] == 58  # the epoch's end
    resumed = Trainer.from_checkpoint(result.run_uri, mode="resume", verbose=False)
    resumed.fit()
    assert torch.load(resumed.result.last_checkpoint, weights_only=True)["global_step"] == 87
    assert weights_digest(resumed.algorithm) == weights_digest(uninterrupted.algorithm)
