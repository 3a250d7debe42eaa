"""The tasks Twinkle knows. Algorithms and data processors declare one of these as ``task``."""

from __future__ import annotations

from twinkle_core.errors import UnknownTaskError

TASKS: dict[str, str] = {
    "tabular_classification": "predict a class from a row of numeric features",
    "tabular_regression": "predict a number from a row of numeric features",
    "image_classification": "predict a class from an image",
    "object_detection": "find boxes and classes of objects in an image",
    "time_series_forecasting": "predict the next values of a time series (e.g. OHLCV bars)",
    "text_to_speech": "synthesise speech audio from text",
}
"""Known task names and what each means."""


def check_task(task: str, extra: tuple[str, ...] = ()) -> str:
    """Return ``task`` if it is known (or in ``extra``), else raise :class:`UnknownTaskError`."""
    if task in TASKS or task in extra:
        return task
    import difflib

    close = difflib.get_close_matches(task, [*TASKS, *extra], n=3)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownTaskError(f"unknown task '{task}'; {hint}known tasks: {', '.join(sorted([*TASKS, *extra]))}")
