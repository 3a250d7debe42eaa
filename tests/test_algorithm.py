"""Bringing a model by subclassing Algorithm, as the article does; hyperparameters and defaults."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from twinkle_core import Algorithm, Trainer
from twinkle_core.errors import TwinkleError
from twinkle_core.hyperparams import HyperparameterError


class KronosModel(Algorithm):
    """The article's example, verbatim in shape."""

    def __init__(self, n_heads=8, d_model=256):
        super().__init__(task="time_series_forecasting")
        self.n_heads, self.d_model = n_heads, d_model


class WideLinear(Algorithm):
    """A user model for tabular classification with a typed hyperparameter."""

    task = "tabular_classification"
    optimizer_defaults = {"lr": 0.01, "optimizer": "sgd"}

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.width = width

    def build_model(self, spec):
        return nn.Sequential(
            nn.BatchNorm1d(spec.num_features),
            nn.Linear(spec.num_features, self.width),
            nn.ReLU(),
            nn.Linear(self.width, spec.num_classes),
        )


def test_article_subclass_declares_hyperparameters() -> None:
    hps = KronosModel.hyperparameters()
    assert hps["n_heads"].default == 8 and hps["n_heads"].annotation is int
    assert hps["d_model"].owner == "algorithm" and hps["lr"].owner == "optimizer"
    model = KronosModel.from_hyperparams({"n_heads": "4", "lr": 3e-4})
    assert model.task == "time_series_forecasting" and model.n_heads == 4 and model.optim.lr == 3e-4
    assert model.hparams["n_heads"] == 4 and model.hparams["lr"] == 3e-4
    with pytest.raises(HyperparameterError, match="unknown hyperparameter 'heads' for KronosModel; valid: d_model"):
        KronosModel.from_hyperparams({"heads": 4})


def test_subclass_trains_through_trainer(twinkle_home, cancer_csv) -> None:
    trainer = Trainer(WideLinear, hyperparams={"width": 32, "max_epochs": 10, "lr": 0.05}, verbose=False)
    result = trainer.fit(str(cancer_csv))
    assert trainer.algorithm.optim.optimizer == "sgd" and trainer.algorithm.optim.lr == 0.05
    assert result.best_metric >= 0.93
    assert trainer.choice.name.endswith(":WideLinear")


def test_task_without_a_processor_is_a_clear_error(twinkle_home, cancer_csv, monkeypatch) -> None:
    from twinkle_core.plugins import reset_plugin_set

    class Speaker(Algorithm):
        """A text-to-speech model, with no plugin loaded that has a data processor for it."""

        def __init__(self, voices: int = 2) -> None:
            super().__init__(task="text_to_speech")

    monkeypatch.setenv("TWINKLE_LOAD_PLUGINS", "")  # core alone: twinkle-audio's voice processor is not loaded
    reset_plugin_set()
    try:
        with pytest.raises(TwinkleError, match="no installed data processor serves text_to_speech"):
            Trainer(Speaker)
    finally:
        monkeypatch.delenv("TWINKLE_LOAD_PLUGINS")
        reset_plugin_set()


@pytest.mark.parametrize(("scheduler", "lr_after"), [("onecycle", None), ("cosine", 0.0), ("step", 1e-5)])
def test_schedulers(scheduler, lr_after) -> None:
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from twinkle_core import DataSpec

    model = WideLinear.from_hyperparams({"scheduler": scheduler, "lr": 1e-3})
    model.configure_data(DataSpec("tabular_classification", (4,), num_classes=2))
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=16))
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    if lr_after is not None:
        assert lr == pytest.approx(lr_after, abs=1e-9)
    else:
        assert lr < 1e-4  # one-cycle ends far below its peak


def test_algorithm_without_task_or_network() -> None:
    class NoTask(Algorithm):
        """No task."""

    with pytest.raises(TwinkleError, match="declares no task"):
        NoTask()
    model = WideLinear()
    with pytest.raises(TwinkleError, match="has seen no data yet"):
        model.example_input()
    bare = type("Bare", (Algorithm,), {"task": "tabular_classification"})()
    with pytest.raises(TwinkleError, match="implement build_model"):
        bare(torch.randn(1, 3))


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_the_default_optimizers_take_torchs_fused_kernel_and_step_as_the_loop_does(name) -> None:
    """Proves every optimizer ``build_optimizer`` makes is fused on plain CPU tensors (groups too), that one step
    moves the weights as torch's default per-tensor loop does, and that tensors without a fused kernel keep torch's
    default."""
    algorithm = WideLinear()
    algorithm.optim.optimizer = name
    torch.manual_seed(0)
    weights = [nn.Parameter(torch.randn(5, 3)), nn.Parameter(torch.randn(3))]
    twins = [nn.Parameter(w.detach().clone()) for w in weights]
    for w, t in zip(weights, twins):
        w.grad = t.grad = torch.randn_like(w)
    fused = algorithm.build_optimizer([{"params": weights[:1]}, {"params": weights[1:], "lr": 0.1}])
    assert all(group["fused"] for group in fused.param_groups)
    loop = type(fused)([{"params": twins[:1]}, {"params": twins[1:], "lr": 0.1}],
                       **{k: v for k, v in fused.defaults.items() if k not in {"fused", "foreach", "lr", "decoupled_weight_decay"}},
                       lr=fused.defaults["lr"], foreach=False)
    fused.step()
    loop.step()
    for w, t in zip(weights, twins):
        torch.testing.assert_close(w, t)
    assert Algorithm.optimizer_kernel([torch.zeros(2, dtype=torch.long)]) == {}
    assert Algorithm.optimizer_kernel([]) == {}
