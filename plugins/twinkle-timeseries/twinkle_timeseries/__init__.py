"""twinkle-timeseries: financial time-series forecasting — OHLCV data processing and Kronos models.

The Twinkle plugin lives in ``twinkle_timeseries.plugin``; it is found through the ``twinkle`` entry-point
group. ``from twinkle_timeseries import FinancialDataProcessor, KronosModel`` imports pandas and torch (on
first use).
"""

from __future__ import annotations

from typing import Any

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-timeseries")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"


_LAZY = {"FinancialDataProcessor": "twinkle_timeseries.data", "KronosModel": "twinkle_timeseries.kronos.model",
         "plot_forecast": "twinkle_timeseries.kronos.frames"}


def __getattr__(name: str) -> Any:
    """Import ``FinancialDataProcessor``, ``KronosModel`` and ``plot_forecast`` (torch) only when asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'twinkle_timeseries' has no attribute '{name}'")
