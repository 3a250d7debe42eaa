"""The Twinkle plugin of twinkle-timeseries, found through the ``twinkle`` entry-point group.

It registers the OHLCV ``FinancialDataProcessor`` for time-series forecasting. The Kronos models arrive with
the rest of the time-series issue. Like every plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations

from twinkle_core import hookimpl
from twinkle_core.hookspecs import Register


@hookimpl
def register_data_processors(register: Register) -> None:
    """OHLCV bars from CSV or Parquet (one file, or a folder of one file per symbol)."""
    register(
        "ohlcv",
        "twinkle_timeseries.data:FinancialDataProcessor",
        task="time_series_forecasting",
        formats=["csv", "parquet", "pq", "folder"],
        description="OHLCV bars: checks, resampling, split adjustment, look-back windows, chronological split",
    )
