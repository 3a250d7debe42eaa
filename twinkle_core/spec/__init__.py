"""What a training is, as one value resolved once: ``TrainingSpec`` (the algorithm, task, hyperparameters, data
processor, resource strategy, where the run goes, its monitor rules and budget, and the checkpoint it continues
from: ``ContinueFrom``) and ``resolve`` (the algorithm and
task chosen, every hyperparameter name and type checked, the trainer's settings typed) — what ``Trainer``,
``Session``, a ``Job``, the service's ``JobRequest`` and the CLI all build, and what the service validates a
submission with, without a ``Trainer``.

``TrainingSpec`` is light to import; ``resolve`` and ``Resolved`` (which load the algorithms' and processors'
classes, and with them torch and Lightning) are imported from ``twinkle_core.spec.resolution`` on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twinkle_core.spec.training import MODES, ContinueFrom, TrainingSpec

if TYPE_CHECKING:
    from twinkle_core.spec.resolution import Resolved, resolve


def __getattr__(name: str) -> Any:
    """``resolve`` and ``Resolved``, imported when first used."""
    if name in ("Resolved", "resolve"):
        from twinkle_core.spec import resolution

        return getattr(resolution, name)
    raise AttributeError(f"module 'twinkle_core.spec' has no attribute '{name}'")


__all__ = ["MODES", "ContinueFrom", "Resolved", "TrainingSpec", "resolve"]
