"""Forecast baselines and the evaluation report, in price units of the windows' close.

Baselines (each maps a look-back of closes to ``pred_len`` future closes):

* ``persistence`` — the last close, repeated;
* ``drift`` — the last close plus the look-back's mean one-bar change per step ahead;
* ``ridge`` — ridge regression from the look-back's z-scored closes to the future's (fitted on training
  windows; predictions mapped back with each window's own look-back statistics).

Report (over windows, horizon ``h`` = 1 … ``pred_len``):

* MAE and MSE of the forecast closes;
* MASE: MAE divided by the mean absolute one-bar change inside the look-backs (the in-sample naive error);
* directional accuracy: how often the sign of (forecast − last close) matches (actual − last close), over
  the steps where both move (undefined for a flat forecast);
* price IC / RankIC: per window, the Pearson / Spearman correlation of forecast and actual returns
  (relative to the last close) across the horizon, averaged over windows;
* cross-sectional RankIC: at each anchor time shared by two or more symbols, the Spearman correlation across
  symbols of the forecast and actual return at the last horizon step, averaged over anchor times.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass
class Windows:
    """Closes of many windows: ``past`` (n × lookback), ``future`` (n × pred_len), and who/when each is."""

    past: np.ndarray
    future: np.ndarray
    symbols: np.ndarray
    anchors: np.ndarray

    @classmethod
    def from_dataset(cls, dataset: Any, close_index: int) -> Windows:
        """Collect the close column of every window of a ``WindowDataset``."""
        past, future, symbols, anchors = [], [], [], []
        for i, (s, start) in enumerate(dataset.windows):
            p, f = dataset.raw(i)
            past.append(p[:, close_index])
            future.append(f[:, close_index])
            series = dataset.series[s]
            symbols.append(series.symbol)
            anchors.append(series.times[start + dataset.lookback - 1])
        return cls(np.array(past), np.array(future), np.array(symbols), np.array(anchors))


def persistence(past: np.ndarray, pred_len: int) -> np.ndarray:
    """The last close, repeated ``pred_len`` times."""
    return np.repeat(past[:, -1:], pred_len, axis=1)


def drift(past: np.ndarray, pred_len: int) -> np.ndarray:
    """The last close plus the mean one-bar change of the look-back, per step ahead."""
    slope = (past[:, -1] - past[:, 0]) / max(past.shape[1] - 1, 1)
    return past[:, -1:] + slope[:, None] * np.arange(1, pred_len + 1)[None, :]


class Ridge:
    """Ridge regression on look-back-normalised closes (closed form, with an intercept)."""

    def __init__(self, alpha: float = 10.0) -> None:
        """``alpha`` is the L2 penalty."""
        self.alpha = alpha
        self.coef: np.ndarray | None = None

    @staticmethod
    def _normalise(past: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mean = past.mean(axis=1, keepdims=True)
        std = past.std(axis=1, keepdims=True)
        std = np.where(std > 1e-8, std, 1.0)
        return (past - mean) / std, mean, std

    def fit(self, past: np.ndarray, future: np.ndarray) -> Ridge:
        """Fit on training windows."""
        x, mean, std = self._normalise(past)
        y = (future - mean) / std
        x1 = np.hstack([x, np.ones((len(x), 1))])
        penalty = self.alpha * np.eye(x1.shape[1])
        penalty[-1, -1] = 0.0
        self.coef = np.linalg.solve(x1.T @ x1 + penalty, x1.T @ y)
        return self

    def predict(self, past: np.ndarray) -> np.ndarray:
        """Forecast closes for each window."""
        if self.coef is None:
            raise ValueError("fit the ridge baseline first")
        x, mean, std = self._normalise(past)
        return np.hstack([x, np.ones((len(x), 1))]) @ self.coef * std + mean


@dataclass
class Report:
    """The metrics of one forecaster (see the module docstring)."""

    mae: float
    mse: float
    mase: float
    directional_accuracy: float
    price_ic: float
    price_rank_ic: float
    cross_sectional_rank_ic: float | None
    windows: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


def _rank(values: np.ndarray) -> np.ndarray:
    """Ranks along the rows, ties sharing their average rank (a flat row has no rank order)."""
    import pandas as pd

    return pd.DataFrame(values).rank(axis=1).to_numpy(dtype=np.float64)


def _row_corr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.where(denominator > 0, (a * b).sum(axis=1) / np.where(denominator > 0, denominator, 1), np.nan)


def evaluate(windows: Windows, forecast: np.ndarray) -> Report:
    """Score ``forecast`` (n × pred_len closes) against the windows' actual future closes."""
    actual, last = windows.future, windows.past[:, -1:]
    error = forecast - actual
    naive = np.abs(np.diff(windows.past, axis=1)).mean()
    predicted_return, actual_return = forecast / last - 1, actual / last - 1
    moves = (actual_return != 0) & (predicted_return != 0)  # a direction needs a move on both sides
    direction = np.sign(predicted_return) == np.sign(actual_return)
    ic = _row_corr(predicted_return, actual_return)
    rank_ic = _row_corr(_rank(predicted_return), _rank(actual_return))
    cross = []
    for anchor in np.unique(windows.anchors):
        rows = np.flatnonzero(windows.anchors == anchor)
        if len(rows) >= 2:
            p, a = predicted_return[rows, -1], actual_return[rows, -1]
            value = _row_corr(_rank(p[None, :]), _rank(a[None, :]))[0]
            if np.isfinite(value):
                cross.append(value)
    return Report(
        mae=float(np.abs(error).mean()),
        mse=float((error**2).mean()),
        mase=float(np.abs(error).mean() / naive) if naive > 0 else float("nan"),
        directional_accuracy=float(direction[moves].mean()) if moves.any() else float("nan"),
        price_ic=float(np.nanmean(ic)) if np.isfinite(ic).any() else float("nan"),
        price_rank_ic=float(np.nanmean(rank_ic)) if np.isfinite(rank_ic).any() else float("nan"),
        cross_sectional_rank_ic=float(np.mean(cross)) if cross else None,
        windows=int(len(actual)),
    )


def baseline_reports(train: Windows, test: Windows) -> dict[str, Report]:
    """Persistence, drift and ridge (fitted on ``train``) evaluated on ``test``."""
    pred_len = test.future.shape[1]
    ridge = Ridge().fit(train.past, train.future)
    return {
        "persistence": evaluate(test, persistence(test.past, pred_len)),
        "drift": evaluate(test, drift(test.past, pred_len)),
        "ridge": evaluate(test, ridge.predict(test.past)),
    }
