"""The Twinkle plugin of twinkle-timeseries, found through the ``twinkle`` entry-point group.

It registers the OHLCV ``FinancialDataProcessor`` and the Kronos sizes ``kronos-tiny`` (trains in CPU
minutes), ``kronos-mini`` (4.1M predictor parameters, context 2048), ``kronos-small`` (24.7M) and
``kronos-base`` (102.3M) for time-series forecasting. Like every plugin module it imports nothing heavy at
its top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl


KRONOS = {
    "tiny": "124k-parameter predictor for CPU minutes, context 512",
    "mini": "4.1M-parameter predictor, context 2048",
    "small": "24.7M-parameter predictor, context 512",
    "base": "102.3M-parameter predictor, context 512",
}


@hookimpl
def register_algorithms(register: Register) -> None:
    """Kronos (BSQ tokenizer + hierarchical decoder-only predictor), random init, in four sizes."""
    for size, what in KRONOS.items():
        register(
            f"kronos-{size}",
            f"twinkle_timeseries.kronos.model:Kronos{size.capitalize()}",
            task="time_series_forecasting",
            description=f"Kronos K-line model (arXiv 2508.02739): {what}; tokenizer then predictor in one fit",
        )


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
