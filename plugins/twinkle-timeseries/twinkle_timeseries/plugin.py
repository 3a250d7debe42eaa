"""The Twinkle plugin of twinkle-timeseries, found through the ``twinkle`` entry-point group.

It provides the Kronos K-line models (``kronos-tiny`` ... ``kronos-base``) and the OHLCV ``FinancialDataProcessor``. It registers no components yet: they arrive with the time-series issue.

Like every Twinkle plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations
