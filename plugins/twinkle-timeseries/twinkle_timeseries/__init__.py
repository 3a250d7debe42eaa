"""twinkle-timeseries: Financial time-series forecasting: Kronos K-line models and OHLCV data processing.

The Twinkle plugin lives in ``twinkle_timeseries.plugin``; it is found through the ``twinkle`` entry-point group.
"""

from __future__ import annotations

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-timeseries")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"
