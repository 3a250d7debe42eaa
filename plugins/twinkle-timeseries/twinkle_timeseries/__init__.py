"""twinkle-timeseries: financial time-series forecasting — OHLCV data processing (Kronos models to come).

The Twinkle plugin lives in ``twinkle_timeseries.plugin``; it is found through the ``twinkle`` entry-point
group. ``from twinkle_timeseries import FinancialDataProcessor`` imports pandas and torch (on first use).
"""

from __future__ import annotations

from typing import Any

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-timeseries")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """Import ``FinancialDataProcessor`` (pandas, torch) only when it is asked for."""
    if name == "FinancialDataProcessor":
        from twinkle_timeseries.data import FinancialDataProcessor

        return FinancialDataProcessor
    raise AttributeError(f"module 'twinkle_timeseries' has no attribute '{name}'")
