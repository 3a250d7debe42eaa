"""Baselines and the evaluation report on real daily bars (bokeh_sampledata's AAPL, IBM, MSFT)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from twinkle_timeseries import FinancialDataProcessor
from twinkle_timeseries.evaluation import Ridge, Windows, baseline_reports, drift, evaluate, persistence


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    from bokeh_sampledata import stocks as data

    folder = tmp_path_factory.mktemp("stocks")
    for symbol in ("AAPL", "IBM", "MSFT"):
        pd.DataFrame(getattr(data, symbol)).to_csv(folder / f"{symbol}.csv", index=False)
    processor = FinancialDataProcessor(lookback_window=30, pred_len=10, val_start="2010-01-01",
                                       test_start="2011-07-01")
    datasets = processor.split_datasets(str(folder))
    close = processor.features.index("close")
    return {name: Windows.from_dataset(ds, close) for name, ds in datasets.items()}


def test_baselines_by_definition() -> None:
    past = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    assert persistence(past, 2).tolist() == [[3.0, 3.0], [5.0, 5.0]]
    assert drift(past, 2).tolist() == [[4.0, 5.0], [5.0, 5.0]]
    x = np.cumsum(np.ones((50, 10)), axis=1) + np.arange(50)[:, None]
    ridge = Ridge(alpha=1e-6).fit(x[:, :7], x[:, 7:])
    assert np.allclose(ridge.predict(x[:, :7]), x[:, 7:], atol=1e-3)  # a straight line continues


def test_perfect_forecast_scores_perfectly(splits) -> None:
    test = splits["test"]
    report = evaluate(test, test.future)
    assert report.mae == 0 and report.directional_accuracy == 1.0
    assert report.price_ic == pytest.approx(1.0) and report.cross_sectional_rank_ic == pytest.approx(1.0)


def test_baseline_reports_on_real_bars(splits) -> None:
    reports = baseline_reports(splits["train"], splits["test"])
    test = splits["test"]
    assert set(reports) == {"persistence", "drift", "ridge"}
    assert reports["persistence"].mae == pytest.approx(np.abs(test.future - test.past[:, -1:]).mean())
    assert reports["persistence"].windows == len(test.future) > 1000  # three symbols after 2011-07
    flat = reports["persistence"]  # a flat forecast has no direction and no correlation
    assert np.isnan(flat.price_ic) and np.isnan(flat.price_rank_ic) and np.isnan(flat.directional_accuracy)
    assert flat.cross_sectional_rank_ic is None
    for name in ("drift", "ridge"):
        assert reports[name].mase > 0 and 0 <= reports[name].directional_accuracy <= 1
    assert reports["ridge"].cross_sectional_rank_ic is not None
    assert reports["ridge"].mae < 1.5 * reports["persistence"].mae  # a sane learned baseline
