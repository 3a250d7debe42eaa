"""How close synthesized speech is to a recording, measured deterministically: mel-cepstral distance after
dynamic time warping (the ``mel-cepstral-distance`` package), and the two baselines a voice must beat — white
noise as loud as the recording, and noise shaped to the recording's mean spectrum."""

from __future__ import annotations

import os
import tempfile

import numpy as np


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


def scores(reference: np.ndarray, spoken: np.ndarray, rate: int) -> dict[str, float]:
    """``mcd`` of the spoken clip and of both baselines against the recording (dB)."""
    return {"mcd": mcd_dtw(reference, spoken, rate), "mcd_white_noise": mcd_dtw(reference, white_noise(reference), rate),
            "mcd_mean_spectrum": mcd_dtw(reference, mean_spectrum_noise(reference, rate), rate)}
