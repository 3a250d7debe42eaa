"""The Twinkle plugin of twinkle-edge, found through the ``twinkle`` entry-point group.

It registers the ``twinkle edge`` commands (``optimize``, ``targets``); ``from twinkle_edge import
EdgeOptimizer`` is the library entry point. Like every Twinkle plugin module it imports nothing heavy at its
top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl


@hookimpl
def register_commands(register: Register) -> None:
    """``twinkle edge``."""
    register("edge", "twinkle_edge.cli:edge",
             description="Prune, fine-tune back, quantize and measure trained models for edge devices")
