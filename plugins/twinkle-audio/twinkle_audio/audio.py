"""Reading and checking speech clips: soundfile decoding (no FFmpeg), mono, resampling (scipy's polyphase
filter), silence trimmed at the ends, and the checks a training clip must pass."""

from __future__ import annotations

import io
from dataclasses import dataclass
from math import gcd

import numpy as np

from twinkle_core.data import DataError


class BadClipError(DataError):
    """A clip that cannot train a voice (unreadable, too short or long, silent, clipped, untranscribed, ...):
    the message names the file, the transcript line and the fix."""


@dataclass
class ClipLimits:
    """What a usable clip is.

    Attributes:
        min_seconds: shortest clip, after trimming.
        max_seconds: longest clip, after trimming.
        silence_db: the ends quieter than this many dB under the clip's peak are trimmed; a clip whose peak is
            under ``-silence_db`` dBFS is silent.
        clipped_fraction: a clip with more than this share of samples at full scale is clipped.
    """

    min_seconds: float = 0.5
    max_seconds: float = 15.0
    silence_db: float = 40.0
    clipped_fraction: float = 0.001


def decode(data: bytes, where: str) -> tuple[np.ndarray, int]:
    """Samples (float32, mono: channels averaged) and the sample rate of an audio file's bytes.

    Raises:
        BadClipError: soundfile cannot read it.
    """
    import soundfile

    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError) as err:
        raise BadClipError(f"{where}: not readable audio ({err}); soundfile reads WAV, FLAC, OGG and MP3") from None
    return samples.mean(axis=1), int(rate)


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``samples`` at ``target`` Hz (polyphase filtering; unchanged when the rates agree)."""
    if rate == target:
        return samples
    from scipy.signal import resample_poly

    common = gcd(int(rate), int(target))
    return resample_poly(samples, target // common, rate // common).astype(np.float32)


def trim(samples: np.ndarray, rate: int, silence_db: float, frame_seconds: float = 0.02) -> np.ndarray:
    """``samples`` without the leading and trailing frames quieter than ``silence_db`` under the peak frame
    (frames of 20 ms, by RMS)."""
    frame = max(int(rate * frame_seconds), 1)
    count = len(samples) // frame
    if count == 0:
        return samples
    rms = np.sqrt(np.mean(samples[:count * frame].reshape(count, frame).astype(np.float64) ** 2, axis=1)) + 1e-12
    loud = np.flatnonzero(20 * np.log10(rms / rms.max()) > -silence_db)
    if not len(loud):
        return samples[:0]
    return samples[loud[0] * frame:min((loud[-1] + 1) * frame, len(samples))]


def check(samples: np.ndarray, rate: int, limits: ClipLimits, where: str) -> np.ndarray:
    """The clip trimmed, after checking it is loud enough, not clipped, and neither too short nor too long.

    Raises:
        BadClipError: naming ``where`` and what is wrong, with the numbers.
    """
    peak = float(np.max(np.abs(samples))) if len(samples) else 0.0
    if peak <= 10 ** (-limits.silence_db / 20):
        raise BadClipError(f"{where}: silent (peak {20 * np.log10(peak + 1e-12):.0f} dBFS, under "
                           f"-{limits.silence_db:g} dBFS); remove it or record it again")
    at_full_scale = float(np.mean(np.abs(samples) >= 0.999))
    if at_full_scale > limits.clipped_fraction:
        raise BadClipError(f"{where}: clipped ({at_full_scale:.2%} of samples at full scale, more than "
                           f"{limits.clipped_fraction:.2%}); record it again at a lower gain")
    trimmed = trim(samples, rate, limits.silence_db)
    seconds = len(trimmed) / rate
    if seconds < limits.min_seconds:
        raise BadClipError(f"{where}: {seconds:.2f} s of speech after trimming silence, under min_seconds="
                           f"{limits.min_seconds:g}; remove it")
    if seconds > limits.max_seconds:
        raise BadClipError(f"{where}: {seconds:.1f} s of speech, over max_seconds={limits.max_seconds:g}; split it "
                           "into sentences (or raise max_seconds)")
    return trimmed
