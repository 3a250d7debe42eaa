"""FinancialDataProcessor on real daily bars (bokeh_sampledata, arch): the article's flow and the checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from twinkle_core import Algorithm, RunStore, Trainer
from twinkle_core.data import DataError, MissingColumnError, MissingValueError
from twinkle_timeseries import FinancialDataProcessor
from twinkle_timeseries.data import OHLCV, OHLCVError

FEATURES = ["open", "high", "low", "close", "volume"]


@pytest.fixture
def twinkle_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    return tmp_path / "home"


@pytest.fixture(scope="module")
def sp500_csv(tmp_path_factory) -> Path:
    """arch's S&P 500 daily bars (1999–2018) as the article's SP500 CSV on a NAS share."""
    from arch.data import sp500

    frame = sp500.load().reset_index()
    path = tmp_path_factory.mktemp("nas") / "financial_data" / "SP500_10y.csv"
    path.parent.mkdir()
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def stocks(tmp_path_factory) -> Path:
    """bokeh_sampledata's AAPL and MSFT daily bars (unadjusted, with adj_close), one file per symbol."""
    from bokeh_sampledata import stocks as data

    folder = tmp_path_factory.mktemp("stocks")
    for symbol in ("AAPL", "MSFT"):
        pd.DataFrame(getattr(data, symbol)).to_csv(folder / f"{symbol}.csv", index=False)
    return folder


class KronosModel(Algorithm):
    """The article's user-defined model, here a small MLP forecaster over the look-back window."""

    def __init__(self, n_heads=8, d_model=256):
        super().__init__(task="time_series_forecasting")
        self.n_heads, self.d_model = n_heads, d_model

    def build_model(self, spec):
        steps, features = spec.input_shape
        out = int(np.prod(spec.target_shape))
        return nn.Sequential(nn.Flatten(), nn.Linear(steps * features, self.d_model), nn.GELU(),
                             nn.Linear(self.d_model, out), nn.Unflatten(1, tuple(spec.target_shape)))

    def compute_loss(self, outputs, targets):
        return nn.functional.mse_loss(outputs, targets)


def test_article_flow_on_a_nas_csv(twinkle_home, sp500_csv, monkeypatch) -> None:
    monkeypatch.setenv("TWINKLE_NAS_ROOT", str(sp500_csv.parent.parent))
    processor = FinancialDataProcessor(timeframe="1d", features=FEATURES)
    trainer = Trainer(algorithm=KronosModel, data_processor=processor,
                      hyperparams={"d_model": 64, "max_epochs": 2, "lr": 1e-3}, progress_bar=False)
    result = trainer.fit(data="nas://financial_data/SP500_10y.csv")
    assert result.status == "finished" and np.isfinite(result.metrics["val_loss"])
    record = RunStore().get(result.run_uri)
    assert record.task == "time_series_forecasting" and record.hyperparams["lookback_window"] == 90
    spec = trainer.algorithm.data_spec
    assert spec.input_shape == (90, 5) and spec.target_shape == (10, 5)
    child = Trainer.from_checkpoint(result.run_uri, hyperparams={"max_epochs": 1}, algorithm=KronosModel,
                                    verbose=False).fit()
    assert child.parent == result.run_uri
    assert "lookback_window" not in trainer.valid_hyperparameters() and "d_model" in trainer.valid_hyperparameters()


def test_chronological_split_without_overlap_and_lookback_only_normalisation(sp500_csv) -> None:
    processor = FinancialDataProcessor(lookback_window=30, pred_len=5, val_start="2012-01-01",
                                       test_start="2015-01-01")
    prepared = processor.prepare(str(sp500_csv))
    series = prepared.train.series[0]
    last_train = max(series.times[s + 34] for _, s in prepared.train.windows)
    first_val = min(series.times[s] for _, s in prepared.val.windows)
    last_val = max(series.times[s + 34] for _, s in prepared.val.windows)
    assert last_train < np.datetime64("2012-01-01") <= first_val and last_val < np.datetime64("2015-01-01")
    assert prepared.details["test_windows"] > 0
    x, y, stamps = prepared.train[100]
    past, future = prepared.train.raw(100)
    s, start = prepared.train.windows[100]
    when = pd.DatetimeIndex(series.times[start:start + 35])
    assert stamps.shape == (35, 5) and stamps[:, 2].tolist() == list(when.day_of_week)  # every bar's calendar
    assert stamps[:, 4].tolist() == list(when.month) and stamps[:, 3].tolist() == list(when.day)
    assert torch.allclose(x.mean(dim=0), torch.zeros(5), atol=1e-5)  # z-scored by the look-back itself
    mean, std = past.mean(axis=0), past.std(axis=0)
    assert np.allclose(y.numpy(), np.clip((future - mean) / std, -5, 5), atol=1e-5)  # future uses past stats


def test_folder_of_symbols_split_adjusted_and_weekly(stocks) -> None:
    daily = FinancialDataProcessor(lookback_window=20, pred_len=5).series(str(stocks))
    assert [s.symbol for s in daily] == ["AAPL", "MSFT"]
    raw = pd.read_csv(stocks / "AAPL.csv")
    close = daily[0].values[:, 3]
    assert np.allclose(close, raw["adj_close"].to_numpy(), rtol=1e-9)  # close × adj_close / close
    weekly = FinancialDataProcessor(timeframe="1w", lookback_window=20, pred_len=5).series(str(stocks))
    assert 0.19 < len(weekly[0].times) / len(daily[0].times) < 0.21
    days = raw.assign(date=pd.to_datetime(raw["date"])).set_index("date")
    first_week = days[days.index <= weekly[0].times[0]]  # Wed 1 – Fri 3 March 2000 (weeks end on Friday)
    adjusted_volume = first_week["volume"] * first_week["close"] / first_week["adj_close"]
    assert len(first_week) == 3 and weekly[0].values[0, 4] == pytest.approx(adjusted_volume.sum())
    assert weekly[0].values[0, 1] == pytest.approx(first_week["high"].mul(first_week["adj_close"] / first_week["close"]).max())


def _frame(sp500_csv: Path) -> pd.DataFrame:
    return pd.read_csv(sp500_csv).iloc[:400].copy()


@pytest.mark.parametrize(
    ("mutate", "error", "message", "repair_key"),
    [
        (lambda f: f.drop(columns=["Close"]), MissingColumnError, "no 'close' column", None),
        (lambda f: f.iloc[::-1], OHLCVError, "timestamps are not sorted", "unsorted"),
        (lambda f: pd.concat([f, f.iloc[[10]]]).sort_values("Date", kind="stable"), OHLCVError,
         "1 duplicate timestamps", "duplicate_timestamps"),
        (lambda f: f.assign(High=np.where(f.index == 5, f["Low"] - 1, f["High"])), OHLCVError,
         "1 bars with high < low", "high_below_low"),
        (lambda f: f.assign(Volume=np.where(f.index == 7, -5, f["Volume"])), OHLCVError,
         "negative volume", "negative_volume"),
        (lambda f: f.assign(Open=np.where(f.index == 9, np.nan, f["Open"])), DataError,
         "bars with NaN values in 'open'", "nan_bars"),
        (lambda f: f.assign(Volume=np.nan), MissingValueError, r"column 'volume' of .* holds no number in any of its "
         "400 bars", None),
        (lambda f: f.assign(Close=f["Close"].astype(object).where(f.index != 12, "12,5")), DataError,
         r"column 'close' of .* holds '12,5' in data row 13 .*which is not a number", None),
    ],
)
def test_bad_bars_raise_or_are_repaired(sp500_csv, tmp_path, mutate, error, message, repair_key) -> None:
    path = tmp_path / "bars.csv"
    mutate(_frame(sp500_csv)).to_csv(path, index=False)
    with pytest.raises(error, match=message):
        FinancialDataProcessor(lookback_window=30, pred_len=5).prepare(str(path))
    if repair_key:
        prepared = FinancialDataProcessor(lookback_window=30, pred_len=5, repair=True).prepare(str(path))
        assert prepared.details["repairs"][repair_key] >= 1


def test_too_few_bars_and_unknown_timeframe(sp500_csv, tmp_path) -> None:
    path = tmp_path / "short.csv"
    _frame(sp500_csv).iloc[:50].to_csv(path, index=False)
    with pytest.raises(DataError, match="at most 50 1d bars per symbol; one window needs 100"):
        FinancialDataProcessor().prepare(str(path))
    with pytest.raises(DataError, match="unknown timeframe '2d'; choose one of 1m, 5m"):
        FinancialDataProcessor(timeframe="2d")


def test_amount_joins_the_default_features_when_every_file_has_it(sp500_csv, tmp_path) -> None:
    frame = pd.read_csv(sp500_csv)
    frame.columns = [c.lower() for c in frame.columns]
    frame["Turnover"] = frame["close"] * frame["volume"]  # traded value, under another common name
    folder = tmp_path / "bars"
    folder.mkdir()
    frame.to_csv(folder / "SPX.csv", index=False)
    prepared = FinancialDataProcessor(lookback_window=30, pred_len=5).prepare(str(folder))
    assert prepared.spec.extra["features"] == ["open", "high", "low", "close", "volume", "amount"]
    assert prepared.spec.input_shape == (30, 6)
    past, _ = prepared.train.raw(0)
    assert past[0, 5] == pytest.approx(past[0, 3] * past[0, 4], rel=1e-3)  # unchanged by split adjustment
    frame.drop(columns=["Turnover"]).to_csv(folder / "NDX.csv", index=False)  # one file without it
    assert FinancialDataProcessor(lookback_window=30, pred_len=5).prepare(str(folder)).spec.input_shape == (30, 5)
    asked = FinancialDataProcessor(lookback_window=30, pred_len=5, features=[*OHLCV, "amount"]).prepare(str(folder))
    assert asked.spec.input_shape == (30, 6)  # NDX's amount derived from its volume and prices, as Kronos does
    frame.drop(columns=["Turnover", "volume"]).to_csv(folder / "NDX.csv", index=False)
    with pytest.raises(MissingColumnError, match="has no 'volume', 'amount' column"):
        FinancialDataProcessor(lookback_window=30, pred_len=5, features=[*OHLCV, "amount"]).prepare(str(folder))
