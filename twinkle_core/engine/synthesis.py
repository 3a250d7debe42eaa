"""``Trainer.synthesize``: audio a generating algorithm makes from text, written as a WAV file (16-bit PCM,
through the standard library's ``wave``), with the run when no path is given."""

from __future__ import annotations

import re
from typing import Any

from twinkle_core.algorithm import Algorithm
from twinkle_core.errors import TwinkleError
from twinkle_core.predictions import wav_bytes
from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.store.runs import RunStore


def synthesize(store: RunStore, model: Algorithm, run_uri: str | None, text: str, output: str | None,
               options: dict[str, Any]) -> str:
    """Run ``model.synthesize(text, **options)`` and write the WAV to ``output`` (any URI; default
    ``<run>/samples/<text>.wav``); returns where it went.

    Raises:
        TwinkleError: the algorithm generates no audio, or there is no run to write beside and no ``output``.
    """
    speak = getattr(model, "synthesize", None)
    if not callable(speak):
        raise TwinkleError(f"{type(model).__name__} does not generate audio (it defines no synthesize(text, ...))")
    samples, rate = speak(text, **options)
    if output is None:
        if run_uri is None:
            raise TwinkleError("this model belongs to no run; pass output='path.wav'")
        slug = re.sub(r"[^\w]+", "-", text, flags=re.U).strip("-")[:40] or "speech"
        output = store.path(store.run_id(run_uri), "samples", f"{slug}.wav")
    atomic_write_bytes(output, wav_bytes(samples, rate))
    return output
