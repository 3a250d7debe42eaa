"""The Twinkle plugin of twinkle-audio, found through the ``twinkle`` entry-point group.

It registers the ``twinkle tts`` commands (``phonemize``). Like every Twinkle plugin module it imports nothing
heavy at its top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl


@hookimpl
def register_commands(register: Register) -> None:
    """``twinkle tts``."""
    register("tts", "twinkle_audio.cli:tts", description="Text-to-speech: offline front ends (zh-cn, en)")
