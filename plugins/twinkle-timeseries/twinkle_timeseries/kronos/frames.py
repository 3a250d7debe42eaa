"""Helpers around forecasts as DataFrames: future timestamps and the forecast PNG."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from twinkle_core.data import atomic_write_bytes
from twinkle_timeseries.data import TIMEFRAMES


def future_index(times: np.ndarray, steps: int, timeframe: str) -> pd.DatetimeIndex:
    """The ``steps`` timestamps after ``times`` at ``timeframe``.

    Daily bars step over weekends when the history has none (stock markets); weekly bars end on Fridays;
    intraday bars step by their length (sessions and holidays are not modelled).
    """
    last = pd.Timestamp(times[-1])
    if timeframe == "1d":
        weekends = (pd.DatetimeIndex(times).day_of_week >= 5).any()
        offset = pd.offsets.Day() if weekends else pd.offsets.BDay()
        return pd.date_range(last + offset, periods=steps, freq=offset)
    if timeframe == "1w":
        return pd.date_range(last + pd.offsets.Week(weekday=4), periods=steps, freq="W-FRI")
    step = pd.Timedelta(TIMEFRAMES[timeframe])
    return pd.DatetimeIndex([last + step * (i + 1) for i in range(steps)])


def plot_forecast(history: pd.DataFrame, forecast: pd.DataFrame, path: str, actual: pd.DataFrame | None = None,
                  column: str = "close", title: str = "Kronos forecast") -> str:
    """Write a PNG of ``history`` and ``forecast`` (and ``actual`` future bars when known) to ``path``.

    ``path`` is any fsspec URI; the file is written atomically. Returns ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(history.index, history[column], color="0.3", label="history")
    if actual is not None:
        ax.plot(actual.index, actual[column], color="tab:green", label="actual")
    ax.plot(forecast.index, forecast[column], color="tab:red", marker=".", label="forecast")
    ax.set_title(title)
    ax.set_ylabel(column)
    ax.legend(loc="best")
    fig.autofmt_xdate()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path
