"""Named errors for bad data. Each message names the file, row or column and the fix."""

from __future__ import annotations

from twinkle_core.errors import TwinkleError
from twinkle_core.uris import DataNotFoundError


class DataError(TwinkleError, ValueError):
    """Data that exists but cannot be used as it is."""


class EmptyDataError(DataError):
    """A data file or folder holds no samples."""


class MissingColumnError(DataError, KeyError):
    """A required column (the label, a feature) is absent."""

    def __str__(self) -> str:  # KeyError would quote the message
        """The message as given, without KeyError's quotes."""
        return str(self.args[0]) if self.args else ""


class NonNumericError(DataError):
    """A column that must be numeric holds text."""


class MissingValueError(DataError):
    """NaN or empty cells where numbers are required."""


class UnsupportedFormatError(DataError):
    """A file whose format the chosen data processor cannot read."""


class SamplesNotSupportedError(TwinkleError):
    """A data processor that cannot read test or new data with a run's spec (it does not implement
    ``DataProcessor.read_samples``), so ``evaluate`` and ``predict`` cannot use it."""


__all__ = [
    "DataError",
    "DataNotFoundError",
    "EmptyDataError",
    "MissingColumnError",
    "MissingValueError",
    "NonNumericError",
    "SamplesNotSupportedError",
    "UnsupportedFormatError",
]
