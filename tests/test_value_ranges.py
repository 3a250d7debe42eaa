"""Every declared hyperparameter has a range: a value outside it is a named error (key, value, range) raised
before any run is created — from Python and from the CLI, without a traceback."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from twinkle_core import RunStore, Trainer
from twinkle_core.cli import main
from twinkle_core.errors import BudgetError, HyperparameterError, SearchSpaceError

CASES = [
    ({"max_epochs": -1}, "would train forever without max_steps"),
    ({"max_epochs": 0}, "max_epochs=0 trains nothing"),
    ({"batch_size": 0}, r"'batch_size' = 0 is out of range: it must be >= 1"),
    ({"lr": -1e-3}, r"'lr' = -0.001 is out of range: it must be > 0"),
    ({"lr": math.nan}, r"'lr' = nan is out of range"),
    ({"lr": math.inf}, r"'lr' = inf is out of range: it must be < inf"),
    ({"weight_decay": -0.1}, r"'weight_decay' = -0.1 is out of range: it must be >= 0"),
    ({"dropout": 1.5}, r"'dropout' = 1.5 is out of range: it must be < 1"),
    ({"val_fraction": 1.0}, r"'val_fraction' = 1.0 is out of range"),
    ({"hidden_sizes": [64, 0]}, r"'hidden_sizes' = \[64, 0\] is out of range"),
    ({"precision": "fp8"}, r"'precision' expects .*choose one of '64-true'"),
    ({"num_workers": -2}, r"'num_workers' = -2 is out of range: it must be >= 0"),
    ({"devices": 0}, r"'devices' = 0 is out of range"),
]


@pytest.mark.parametrize(("hyperparams", "message"), CASES, ids=[next(iter(c[0])) + "=" + str(next(iter(c[0].values())))
                                                                   for c in CASES])
def test_a_value_out_of_range_is_named_before_any_run(twinkle_home, cancer_csv, hyperparams, message) -> None:
    with pytest.raises(HyperparameterError, match=message):
        Trainer("tabular-mlp", hyperparams={"max_epochs": 1, **hyperparams}, verbose=False).fit(str(cancer_csv))
    assert RunStore().list() == []  # nothing was created, nothing left running


def test_no_epoch_limit_is_fine_with_a_step_limit(twinkle_home, cancer_csv) -> None:
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": -1, "max_steps": 5}, verbose=False).fit(str(cancer_csv))
    assert result.status == "finished"


@pytest.mark.parametrize(("args", "message"), [(["--epochs", "-1"], "would train forever"),
                                               (["--hp", "batch_size=0"], "'batch_size' = '0' is out of range: it must be >= 1")])
def test_the_cli_names_the_value_without_a_traceback(twinkle_home, cancer_csv, args, message) -> None:
    result = CliRunner().invoke(main, ["train", "tabular-mlp", "--data", str(cancer_csv), *args])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    assert RunStore().list() == []


def test_an_empty_search_space_and_a_negative_budget_are_refused(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", verbose=False)
    with pytest.raises(SearchSpaceError, match="params_space is empty"):
        trainer.tune(params_space={}, data=str(cancer_csv))
    with pytest.raises(BudgetError, match="max_gpu_hours=-5 is not a limit"):
        trainer.set_budget_alert(max_gpu_hours=-5)
    assert RunStore().list() == []


def test_an_error_inside_fit_leaves_the_run_failed(twinkle_home, cancer_csv, monkeypatch) -> None:
    import lightning as L

    def broken(*args, **kwargs):
        raise ValueError("the accelerator went away")

    monkeypatch.setattr(L, "Trainer", broken)  # fails where Lightning is set up, after the run was created
    with pytest.raises(ValueError, match="went away"):
        Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).fit(str(cancer_csv))
    (run,) = RunStore().list()
    assert run.status == "failed" and "went away" in run.error
