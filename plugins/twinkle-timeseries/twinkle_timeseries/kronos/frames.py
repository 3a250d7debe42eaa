"""Helpers around forecasts as DataFrames: future timestamps (``future_index``, kept with the timeframes in
``twinkle_timeseries.data``) and the forecast PNG."""

from __future__ import annotations

import io

import pandas as pd

from twinkle_core.data import atomic_write_bytes
from twinkle_timeseries.data import future_index

__all__ = ["future_index", "plot_forecast"]


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
