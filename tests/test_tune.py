"""trainer.tune: search space, TPE with a small-budget startup, pruning, SQLite resume, warm start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from twinkle_core import RunStore, Trainer
from twinkle_core.cli import main
from twinkle_core.cli.ops import parse_space
from twinkle_core.ops.tuning import SearchSpaceError, distributions, startup_trials

SPACE = {"lr": (1e-4, 1e-1), "batch_size": [16, 32, 64]}


def test_search_space_kinds() -> None:
    dists = distributions({"lr": (1e-5, 1e-3), "dropout": (0.0, 0.5), "layers": (1, 4), "width": (8, 512),
                           "batch_size": [32, 64, 128]})
    assert dists["lr"].log and not dists["dropout"].log
    assert isinstance(dists["layers"], optuna.distributions.IntDistribution) and not dists["layers"].log
    assert dists["width"].log
    assert dists["batch_size"].choices == (32, 64, 128)
    with pytest.raises(SearchSpaceError, match="'lr' = 0.1: use a \\(low, high\\) tuple"):
        distributions({"lr": 0.1})
    with pytest.raises(SearchSpaceError, match="low < high"):
        distributions({"lr": (1e-3, 1e-5)})
    assert [startup_trials(n) for n in (5, 20, 40, 100)] == [3, 5, 10, 10]
    assert parse_space(("lr=1e-5:1e-3", "batch_size=32,64", "act=relu,gelu")) == {
        "lr": (1e-5, 1e-3), "batch_size": [32, 64], "act": ["relu", "gelu"]}


def test_tune_finds_good_params_and_returns_a_trainer(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 4}, project="cancer", verbose=False)
    result = trainer.tune(params_space=SPACE, max_trials=8, data=str(cancer_csv))
    assert result.metric == "val_accuracy" and result.direction == "maximize"
    assert result.completed + result.pruned == 8 and result.completed >= 3
    assert result.best_value >= 0.93 and set(result.best_params) == {"lr", "batch_size"}
    assert Path(result.history_png).read_bytes()[:4] == b"\x89PNG"
    runs = RunStore().list(project="cancer-tune")
    assert len(runs) == 8 and result.best_run in {r.uri for r in runs}
    tuned = result.trainer
    assert tuned.hyperparams["lr"] == result.best_params["lr"] and tuned.hyperparams["max_epochs"] == 4
    again = trainer.tune(params_space=SPACE, max_trials=8, data=str(cancer_csv))
    assert again.study_name == result.study_name and len(RunStore().list(project="cancer-tune")) == 8
    wider = trainer.tune(params_space={"lr": (1e-5, 1.0), "batch_size": [16, 32, 64, 128]}, max_trials=10,
                         data=str(cancer_csv))
    study = optuna.load_study(study_name=wider.study_name, storage=wider.storage)
    warm = [t for t in study.trials if "warm_start_from" in t.user_attrs]
    assert len(warm) == result.completed  # the earlier study's finished trials seed the new one
    assert len(RunStore().list(project="cancer-tune")) == 18


def test_unknown_tuned_name(twinkle_home, cancer_csv) -> None:
    with pytest.raises(SearchSpaceError, match="cannot tune learning_rate"):
        Trainer("tabular-mlp", verbose=False).tune({"learning_rate": (1e-4, 1e-2)}, data=str(cancer_csv))


SCRIPT = textwrap.dedent(
    '''
    import os, signal, sys
    import lightning as L
    from twinkle_core import Trainer

    class KillOnTrial(L.Callback):
        """SIGKILL this process when the Nth trial of this process starts training."""
        started = 0
        def on_train_start(self, trainer, module):
            KillOnTrial.started += 1
            if KillOnTrial.started == int(sys.argv[2]):
                os.kill(os.getpid(), signal.SIGKILL)

    callbacks = [KillOnTrial()] if int(sys.argv[2]) > 0 else []
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, verbose=False, callbacks=callbacks)
    result = trainer.tune({"lr": (1e-4, 1e-1), "batch_size": [16, 32, 64]}, max_trials=6, data=sys.argv[1],
                          pruning=False)
    print("DONE", result.completed, result.study_name)
    '''
)


def test_killed_tuning_resumes_without_repeating_finished_trials(twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "tune.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    killed = subprocess.run([sys.executable, str(script), str(cancer_csv), "4"], capture_output=True, text=True,
                            env=env, timeout=600)
    assert killed.returncode == -signal.SIGKILL
    storage = f"sqlite:///{twinkle_home / 'studies.sqlite'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    before = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    finished_before = {t.number: t.params for t in before if t.state == optuna.trial.TrialState.COMPLETE}
    assert len(finished_before) == 3 and before[-1].state == optuna.trial.TrialState.RUNNING
    resumed = subprocess.run([sys.executable, str(script), str(cancer_csv), "0"], capture_output=True, text=True,
                             env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.split()[-2] == "6"
    after = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    complete = {t.number: t.params for t in after if t.state == optuna.trial.TrialState.COMPLETE}
    assert len(complete) == 6
    assert all(complete[n] == params for n, params in finished_before.items())  # kept, not re-run
    assert after[3].state == optuna.trial.TrialState.FAIL  # the killed trial, retried as a new one
    assert any(t.user_attrs.get("retry_of") == 3 and t.params == after[3].params for t in after)
    # runs: 3 finished before + 1 killed + 3 in the resumed process
    assert len(RunStore().list(project="default-tune")) == 7


def test_tune_cli(twinkle_home, cancer_csv) -> None:
    result = CliRunner().invoke(main, ["tune", "tabular-mlp", "-d", str(cancer_csv), "-s", "lr=1e-3:1e-1",
                                       "-n", "3", "--epochs", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert '"completed"' in result.output and '"best_params"' in result.output
