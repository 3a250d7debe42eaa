"""MCD-DTW ranks speech as it should on generated clips: a clip is 0 dB from itself, the same sentence at another
pitch is close, another sentence is far, and both noise baselines are farther still."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from twinkle_audio.quality import mcd_dtw, mean_spectrum_noise, scores, white_noise
from twinkle_audio.samples import write_espeak_corpus


def test_mcd_dtw_ranks_same_sentence_other_sentence_and_noise(tmp_path) -> None:
    corpus = write_espeak_corpus(tmp_path / "en", "en", count=13, rate=16000)  # clips 0 and 12: one sentence
    read = lambda i: soundfile.read(corpus / "wavs" / f"clip{i:04d}.wav", dtype="float32")[0]  # noqa: E731
    first, again, other = read(0), read(12), read(5)
    assert mcd_dtw(first, first, 16000) == 0.0
    same = scores(first, again, 16000)
    different = mcd_dtw(first, other, 16000)
    assert same["mcd"] < 4.0 < different
    assert min(same["mcd_white_noise"], same["mcd_mean_spectrum"]) > 10.0
    assert scores(first, again, 16000) == same  # deterministic


def test_mcd_dtw_is_the_libraries_figure_and_its_path_is_fastdtws(tmp_path) -> None:
    """``mcd_dtw`` aligns frames itself (the library's pure-Python FastDTW took a quarter of a voice's training):
    its figure equals ``mel_cepstral_distance.compare_audio_files`` on the same clips written as WAV files, and
    ``fastdtw_path`` finds exactly ``fastdtw``'s path, silent (tied) frames included."""
    from fastdtw.fastdtw import fastdtw
    from mel_cepstral_distance import compare_audio_files
    from scipy.spatial.distance import euclidean

    from twinkle_audio.quality import fastdtw_path

    corpus = write_espeak_corpus(tmp_path / "en", "en", count=3, rate=16000)
    first, other = (soundfile.read(corpus / "wavs" / f"clip{i:04d}.wav", dtype="float32")[0] for i in (0, 2))
    for reference, clip in ((first, other), (other, first[:6000]), (first, mean_spectrum_noise(first, 16000))):
        paths = [tmp_path / "a.wav", tmp_path / "b.wav"]
        for path, samples in zip(paths, (reference, clip)):
            soundfile.write(path, samples, 16000, subtype="FLOAT")
        library, _ = compare_audio_files(paths[0], paths[1], sample_rate=16000, aligning="dtw")
        assert mcd_dtw(reference, clip, 16000) == library
    rng = np.random.default_rng(0)
    for rows, columns in ((5, 8), (90, 61), (240, 200)):
        x, y = rng.standard_normal((rows, 20)).cumsum(0), rng.standard_normal((columns, 20)).cumsum(0)
        x[:12], y[:20] = 0.0, 0.0  # silence: equal costs, where only the order of the steps decides
        assert fastdtw_path(x, y, 10) == fastdtw(x, y, radius=10, dist=euclidean)[1]


def test_the_baselines_keep_the_recordings_length_and_loudness() -> None:
    rng = np.random.default_rng(1)
    recording = (np.sin(np.arange(16000) * 0.05) * 0.3 + rng.normal(0, 0.01, 16000)).astype(np.float32)
    noise, shaped = white_noise(recording), mean_spectrum_noise(recording, 16000)
    assert len(noise) == len(shaped) == len(recording)
    assert abs(np.sqrt(np.mean(noise ** 2)) - np.sqrt(np.mean(recording ** 2))) < 0.01


def test_closed_set_identification_and_whisper_wer_tell_speech_from_noise(tmp_path) -> None:
    from twinkle_audio.quality import closed_set_identification, word_error_rate

    corpus = write_espeak_corpus(tmp_path / "en", "en", count=6, rate=22050)  # recognisers resample to 16 kHz
    texts = [line.split("|", 1)[1] for line in (corpus / "metadata.csv").read_text().splitlines()]
    clips = [soundfile.read(corpus / "wavs" / f"clip{i:04d}.wav", dtype="float32")[0] for i in range(6)]
    noise = [white_noise(clip) for clip in clips]
    silence = [np.zeros_like(clip) for clip in clips]  # exact digital zeros: dithered, not a crash
    assert closed_set_identification(clips, texts, 22050) == 1.0
    assert closed_set_identification(noise, texts, 22050) == 0.0
    assert closed_set_identification(silence, texts, 22050) == 0.0
    assert word_error_rate(clips, texts, 22050) < 0.5
    assert word_error_rate(noise, texts, 22050) > 0.9


def test_identification_refuses_words_outside_the_recognisers_dictionary() -> None:
    from twinkle_core.errors import TwinkleError

    from twinkle_audio.quality import closed_set_identification

    with pytest.raises(TwinkleError, match="lacks qzxv"):
        closed_set_identification([np.zeros(16000, np.float32)], ["The qzxv ran."], 16000)
