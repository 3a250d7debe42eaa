"""The Twinkle plugin of twinkle-audio, found through the ``twinkle`` entry-point group.

It registers the speech data processor (``voice-folder``) and the ``twinkle tts`` commands (``phonemize``).
Like every Twinkle plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl


@hookimpl
def register_commands(register: Register) -> None:
    """``twinkle tts``."""
    register("tts", "twinkle_audio.cli:tts", description="Text-to-speech: offline front ends (zh-cn, en)")


@hookimpl
def register_data_processors(register: Register) -> None:
    """A voice corpus: audio files and a transcript (metadata.csv or a MeloTTS filelist) at any URI."""
    register("voice-folder", "twinkle_audio.speech_data:SpeechDataProcessor", task="text_to_speech",
             formats=["folder", "csv", "list"],
             description="audio clips + metadata.csv (id|text) or a MeloTTS filelist; checked clip by clip")


@hookimpl
def register_algorithms(register: Register) -> None:
    """MelOTTS (``melotts`` is the tiny size)."""
    register("melotts", "twinkle_audio.melotts:MelOTTS", task="text_to_speech", aliases=["melotts-tiny"],
             description="MeloTTS-style VITS voice (tones, languages, speakers); tiny: CPU-trainable")
    register("melotts-base", "twinkle_audio.melotts:MelOTTSBase", task="text_to_speech",
             description="MeloTTS-style VITS voice, GPU-sized")


@hookimpl
def register_checks(register: Register) -> None:
    """``twinkle doctor``: libsndfile (every clip is decoded with it) and espeak-ng."""
    register("libsndfile", "twinkle_audio.checks:libsndfile", description="soundfile's libsndfile, which decodes clips")
    register("espeak-ng", "twinkle_audio.checks:espeak_ng", description="espeak-ng, MelOTTS's phonemizer for new words")
