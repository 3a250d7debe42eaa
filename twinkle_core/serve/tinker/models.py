"""What the Tinker API keeps of a training model (``TrainingModel``) and where its run is recorded."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from twinkle_core.lowlevel import LoraSettings

PROJECT = "tinker"
"""The store project every Tinker training model's run belongs to."""

ALGORITHM = "tinker-lora"
"""The algorithm name Tinker training runs are recorded under."""


@dataclass
class TrainingModel:
    """A training model: its owner, base, adapters, run, vocabulary size and its requests' order (``next_seq``,
    ``waiting``, ``by_seq``: ``twinkle_core.serve.tinker.ordering.Requests``)."""

    id: str
    user: str
    base: str
    lora: LoraSettings
    run_id: str
    vocab: int
    next_seq: int = 1
    waiting: dict[int, tuple[Any, Callable[[], Any] | None]] = field(default_factory=dict)
    by_seq: dict[int, str] = field(default_factory=dict)
    steps: int = 0
    pending_loss: float | None = None
    used: float = field(default_factory=time.monotonic)
    has_gradients: bool = False
    offloaded: bool = False
    offloads: int = 0
    catalogued: float = 0.0
    """When (``time.monotonic``) its latest metrics last went into the run's catalogue row."""
    uncatalogued: dict[str, Any] | None = None
    reporter: Any = None
    """Its run's experiment trackers (``twinkle_core.tracking.Reporter``; the server's ``tinker_report_to``)."""


__all__ = ["ALGORITHM", "PROJECT", "TrainingModel"]
