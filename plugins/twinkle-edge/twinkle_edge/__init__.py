"""twinkle-edge: edge deployment — structured pruning, recovery fine-tuning, INT8 quantization, measured.

``from twinkle_edge import EdgeOptimizer`` (the article's ``EdgeOptimizer(model="twinkle://models/NAME",
target=..., pruning_ratio=0.3)``); the Twinkle plugin lives in ``twinkle_edge.plugin``.
"""

from __future__ import annotations

from typing import Any

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-edge")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["EdgeOptimizer", "EdgeReport", "__version__"]


def __getattr__(name: str) -> Any:
    """``EdgeOptimizer`` and ``EdgeReport``, imported on first use (they pull in torch)."""
    if name == "EdgeOptimizer":
        from twinkle_edge.optimizer import EdgeOptimizer

        return EdgeOptimizer
    if name == "EdgeReport":
        from twinkle_edge.report import EdgeReport

        return EdgeReport
    raise AttributeError(name)
