"""What several commands take the same way: ``--hp KEY=VALUE`` pairs and ``--epochs N``."""

from __future__ import annotations

from typing import Any

from twinkle_core.errors import TwinkleError


def hyperparams_from(pairs: tuple[str, ...], epochs: int | None) -> dict[str, Any]:
    """The hyperparameters ``--hp key=value`` (repeated) and ``--epochs N`` name, values as given (typed later by
    whoever declares them).

    Raises:
        TwinkleError: a pair without ``=`` or without a key.
    """
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TwinkleError(f"--hp takes key=value, got {pair!r} (for example --hp lr=0.001)")
        values[key.strip()] = value.strip()
    if epochs is not None:
        values["max_epochs"] = epochs
    return values
