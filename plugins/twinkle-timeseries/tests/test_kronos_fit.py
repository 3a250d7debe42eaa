"""kronos-tiny trained by Twinkle on real daily bars (bokeh_sampledata): two stages, forecasts, the article's subclass."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch

from twinkle_core import Trainer
from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_timeseries import FinancialDataProcessor, KronosModel, plot_forecast

WINDOWS = {"lookback_window": 30, "pred_len": 10, "val_start": "2009-01-01", "test_start": "2011-01-01", "stride": 3}


@pytest.fixture(scope="module")
def stocks(tmp_path_factory) -> Path:
    """bokeh_sampledata's AAPL, IBM and MSFT daily bars, one CSV per symbol."""
    from bokeh_sampledata import stocks as data

    folder = tmp_path_factory.mktemp("bars")
    for symbol in ("AAPL", "IBM", "MSFT"):
        pd.DataFrame(getattr(data, symbol)).to_csv(folder / f"{symbol}.csv", index=False)
    return folder


@pytest.fixture
def twinkle_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class Snapshots(L.Callback):
    """Copies of the tokenizer's and predictor's weights at the end of every training epoch."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, torch.Tensor]] = []

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        net = pl_module.network
        self.epochs.append({part: torch.cat([p.detach().flatten() for p in getattr(net, part).parameters()]).clone()
                            for part in ("tokenizer", "predictor")})


@pytest.fixture(scope="module")
def trained(stocks, tmp_path_factory):
    """kronos-tiny by name, the ohlcv processor chosen for it: two tokenizer epochs, then two predictor epochs."""
    home = tmp_path_factory.mktemp("home")
    snapshots = Snapshots()
    trainer = Trainer("kronos-tiny", home=str(home), verbose=False, progress_bar=False, callbacks=[snapshots],
                      hyperparams={**WINDOWS, "max_epochs": 4, "tokenizer_epochs": 2, "lr": 3e-3, "seed": 0})
    result = trainer.fit(data=str(stocks))
    return trainer, result, snapshots


def test_two_stages_in_one_fit_learn_tokens_and_their_sequence(trained) -> None:
    trainer, result, snapshots = trained
    model = trainer.algorithm
    assert result.status == "finished" and result.monitor == "val_mase"
    epochs = snapshots.epochs
    assert not torch.equal(epochs[0]["tokenizer"], epochs[1]["tokenizer"])  # stage one trains the tokenizer …
    assert torch.equal(epochs[0]["predictor"], epochs[1]["predictor"])  # … alone
    assert not torch.equal(epochs[2]["predictor"], epochs[3]["predictor"])  # stage two trains the predictor …
    assert all(torch.equal(epochs[1]["tokenizer"], e["tokenizer"]) for e in epochs[2:])  # … on a frozen tokenizer
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv").groupby("epoch").last()
    assert metrics["val_recon_mse"].iloc[-1] < 0.16  # z-units, all bits (0.11–0.12 over seeds 0–2)
    assert metrics["val_coarse_recon_mse"].iloc[-1] > metrics["val_recon_mse"].iloc[-1]  # fine bits refine
    assert metrics["val_loss"].iloc[-1] < 0.5 * model.uniform_ce  # well below a uniform guess (1.2–1.3 vs 4.16)
    assert metrics["val_loss"].iloc[-1] < metrics["val_loss"].iloc[1]  # the predictor stage lowers it
    assert trainer.algorithm.data_spec.extra["features"] == ["open", "high", "low", "close", "volume"]


def test_validation_reports_forecast_error_against_persistence(trained) -> None:
    """MAE, MASE and direction of the decoded forecast, persistence's MASE beside it; MASE picks the best."""
    trainer, result, _ = trained
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv").groupby("epoch").last()
    for name in ("val_mae", "val_mase", "val_persistence_mase", "val_direction"):
        assert np.isfinite(metrics[name]).all() and name in result.metrics
    assert 0.0 <= metrics["val_direction"].min() and metrics["val_direction"].max() <= 1.0
    assert metrics["val_persistence_mase"].nunique() == 1  # the same windows every epoch
    assert 0.5 < metrics["val_persistence_mase"].iloc[0] < 5  # z-units: a 10-bar horizon drifts a few steps
    assert result.best_metric == pytest.approx(metrics["val_mase"].min())
    assert metrics["val_mase"].iloc[-1] < metrics["val_mase"].iloc[1]  # the predictor stage forecasts better
    record = trainer.store.get(result.run_uri)
    assert record.metrics["best_val_mase"] == pytest.approx(result.best_metric)  # what runs list shows


def test_predict_returns_future_bars_and_a_png(trained, stocks, tmp_path) -> None:
    trainer, _, _ = trained
    model = trainer.algorithm
    bars = pd.read_csv(stocks / "AAPL.csv")
    history = bars[bars["date"] < "2011-06-01"].tail(60)
    forecast = model.predict(history, pred_len=10, T=1.0, top_p=0.9, sample_count=8, seed=1)
    assert list(forecast.columns) == ["open", "high", "low", "close", "volume"] and len(forecast) == 10
    last = pd.Timestamp(history["date"].iloc[-1])
    assert forecast.index[0] > last and (forecast.index.day_of_week < 5).all()  # business days after the history
    close = history["close"].iloc[-1] * history["adj_close"].iloc[-1] / history["close"].iloc[-1]  # adjusted
    assert np.all(np.abs(forecast["close"] / close - 1) < 0.25)
    assert forecast.equals(model.predict(history, pred_len=10, sample_count=8, seed=1))
    assert not forecast.equals(model.predict(history, pred_len=10, sample_count=8, seed=2))
    indexed = history.assign(date=pd.to_datetime(history["date"])).set_index("date").rename(columns=str.upper)
    assert model.predict(indexed, pred_len=10, sample_count=8, seed=1).equals(forecast)  # index, any case
    longer = model.predict(history, pred_len=15, T=0.5, sample_count=2, seed=0)
    assert len(longer) == 15
    png = plot_forecast(history.set_index(pd.to_datetime(history["date"])), forecast, str(tmp_path / "f.png"))
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(TwinkleError, match="no 'close' column"):
        model.predict(history.drop(columns=["close"]), pred_len=5)


class MyKronos(KronosModel):
    """The article's shape: typed keyword hyperparameters, the other sizes passed on."""

    def __init__(self, n_heads: int = 8, d_model: int = 256) -> None:
        super().__init__(n_heads=n_heads, d_model=d_model, n_layers=1, ff_dim=64, s1_bits=4, s2_bits=4,
                         tokenizer_d_model=32, tokenizer_ff_dim=64, tokenizer_layers=1, tokenizer_epochs=1)


def test_a_subclass_as_in_the_article_trains_and_continues(stocks, twinkle_home, monkeypatch) -> None:
    monkeypatch.setenv("TWINKLE_NAS_ROOT", str(stocks.parent))
    processor = FinancialDataProcessor(**{**WINDOWS, "stride": 10})
    trainer = Trainer(algorithm=MyKronos, data_processor=processor, progress_bar=False, verbose=False,
                      hyperparams={"n_heads": 4, "d_model": 32, "max_epochs": 2})
    result = trainer.fit(data=f"nas://{stocks.name}")
    assert result.status == "finished" and trainer.algorithm.network.predictor.transformer[0].self_attn.n_heads == 4
    assert "d_model" in trainer.valid_hyperparameters() and "tokenizer_layers" not in trainer.valid_hyperparameters()
    # a class that is not registered continues only when the caller passes it (the checkpoint's path is not imported)
    child = Trainer.from_checkpoint(result.run_uri, hyperparams={"max_epochs": 2}, algorithm=MyKronos, verbose=False).fit()
    assert child.parent == result.run_uri and child.status == "finished"
    with pytest.raises(HyperparameterError, match="max_epochs \\(1\\) must be larger"):
        Trainer.from_checkpoint(result.run_uri, hyperparams={"max_epochs": 1}, algorithm=MyKronos, verbose=False).fit()


def test_export_is_refused_with_a_named_error(trained) -> None:
    trainer, _, _ = trained
    with pytest.raises(TwinkleError, match="cannot be exported yet"):
        trainer.export(format="onnx")


def test_evaluate_on_the_validation_bars_reproduces_the_validation_forecast_scores(trained, stocks, tmp_path) -> None:
    """``evaluate`` reads bars with the run's features, look-back, horizon and stride: given each symbol's bars from
    its first validation window to the test split, it scores the same windows with the same sampling noise, so its
    MASE equals the best checkpoint's validation MASE within 1e-6, persistence's MASE beside it; the price IC of the
    forecasts is reported. ``predict`` writes each symbol's next ``pred_len`` bars after its latest look-back, in
    prices: for one symbol exactly what ``KronosModel.predict(df, seed=0)`` forecasts with the best weights."""
    trainer, result, _ = trained
    processor = FinancialDataProcessor(**{k: v for k, v in WINDOWS.items()})
    series = processor.series(str(stocks))
    first = {}
    for s, start in processor.windows(series, "val"):
        first.setdefault(s, start)
    folder = tmp_path / "validation-bars"
    folder.mkdir()
    for s, item in enumerate(series):
        frame = pd.read_csv(stocks / f"{item.symbol}.csv")
        times = pd.to_datetime(frame["date"])
        keep = (times >= pd.Timestamp(item.times[first[s]])) & (times < pd.Timestamp(WINDOWS["test_start"]))
        frame[keep].to_csv(folder / f"{item.symbol}.csv", index=False)
    evaluation = trainer.evaluate(str(folder), output=str(tmp_path / "evaluation"))
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv").groupby("epoch").last()
    best = metrics.loc[metrics["val_mase"].idxmin()]
    assert evaluation.samples == len(processor.windows(series, "val"))
    assert evaluation.metrics["mase"] == pytest.approx(best["val_mase"], abs=1e-6)
    assert evaluation.metrics["persistence_mase"] == pytest.approx(best["val_persistence_mase"], abs=1e-6)
    assert -1.0 <= evaluation.metrics["ic"] <= 1.0 and np.isfinite(evaluation.metrics["mae"])
    bars = trainer.predict(str(folder), str(tmp_path / "bars.csv"))  # each symbol's next bars
    table = pd.read_csv(bars.output)
    pred_len = WINDOWS["pred_len"]
    assert bars.count == 3 * pred_len and list(table.columns) == ["id", "time", "open", "high", "low", "close",
                                                                    "volume"]
    assert table["id"].tolist() == [s for s in ("AAPL", "IBM", "MSFT") for _ in range(pred_len)]
    single = tmp_path / "msft"
    single.mkdir()
    (single / "MSFT.csv").write_text((folder / "MSFT.csv").read_text())
    alone = pd.read_csv(trainer.predict(str(single), str(tmp_path / "msft.csv")).output)
    expected = trainer.model_for_export()[0].predict(pd.read_csv(single / "MSFT.csv"), seed=0)  # the best weights
    assert pd.to_datetime(alone["time"]).tolist() == list(expected.index)
    np.testing.assert_allclose(alone[list(expected.columns)].to_numpy(), expected.to_numpy(), rtol=1e-5)
