"""twinkle-audio: MeloTTS-style text-to-speech training.

``from twinkle_audio import MelOTTS`` (the article's ``from twinkle.audio import MelOTTS``); the Twinkle plugin
lives in ``twinkle_audio.plugin`` and is found through the ``twinkle`` entry-point group.
"""

from __future__ import annotations

from typing import Any

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-audio")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """``MelOTTS`` and ``MelOTTSBase``, imported on first use (torch and coqui-tts are heavy)."""
    if name in ("MelOTTS", "MelOTTSBase"):
        from twinkle_audio import melotts

        return getattr(melotts, name)
    raise AttributeError(f"module 'twinkle_audio' has no attribute {name!r}")
