"""The speech data processor on espeak-ng corpora: clips read, resampled and phonemized; MeloTTS filelists with
speakers; every bad-clip case a named error with its file and transcript line, or skipped and counted."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile

from twinkle_audio.audio import BadClipError
from twinkle_audio.samples import write_espeak_corpus
from twinkle_audio.speech_data import SpeechDataProcessor


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_espeak_corpus(tmp_path_factory.mktemp("voice") / "en", "en", count=10)


def _copy(corpus: Path, tmp_path: Path) -> Path:
    target = tmp_path / "corpus"
    shutil.copytree(corpus, target)
    return target


def test_a_corpus_becomes_phones_and_audio_at_the_models_rate(corpus: Path) -> None:
    prepared = SpeechDataProcessor(lang="en", sample_rate=16000).prepare(str(corpus))
    assert prepared.details["clips"] == 10 and prepared.details["bad_clips"] == 0
    assert (prepared.details["train_clips"], prepared.details["val_clips"]) == (9, 1)
    sample = prepared.train[0]
    audio_seconds = len(sample["audio"]) / 16000  # the clip's length, not a time measured
    assert 1.0 < audio_seconds < 4.0 and sample["audio"].abs().max() <= 1.0
    assert sample["phones"].shape == sample["tones"].shape == sample["languages"].shape
    assert prepared.spec.extra["sample_rate"] == 16000 and prepared.spec.class_names == ("default",)
    batch = prepared.collate_fn([prepared.train[0], prepared.train[1]])
    assert batch["phones"].shape[0] == 2 and int(batch["audio_lengths"].max()) == batch["audio"].shape[1]


def test_a_melotts_filelist_names_speakers_and_languages(corpus: Path, tmp_path: Path) -> None:
    folder = _copy(corpus, tmp_path)
    rows = [line.split("|") for line in (folder / "metadata.csv").read_text().splitlines()]
    (folder / "metadata.csv").unlink()
    (folder / "voices.list").write_text("\n".join(f"wavs/{key}.wav|{'ann' if i % 2 else 'bob'}|EN|{text}"
                                                  for i, (key, text) in enumerate(rows)) + "\n")
    prepared = SpeechDataProcessor(lang="en").prepare(str(folder))
    assert prepared.details["speakers"] == ["ann", "bob"] and prepared.spec.extra["speakers"] == ["ann", "bob"]
    with pytest.raises(BadClipError, match=r"voices.list:1 \(clip0000.wav\): language 'EN', but this corpus is "
                                           r"lang='zh-cn'"):
        SpeechDataProcessor(lang="zh-cn").prepare(str(folder))


def _write(folder: Path, key: str, samples: np.ndarray, rate: int = 22050) -> None:
    soundfile.write(folder / "wavs" / f"{key}.wav", samples.astype(np.float32), rate)


def _speech(corpus: Path) -> tuple[np.ndarray, int]:
    samples, rate = soundfile.read(corpus / "wavs" / "clip0001.wav", dtype="float32")
    return samples, rate


@pytest.mark.parametrize("case", ["unreadable", "short", "long", "silent", "clipped", "empty text", "characters",
                                  "language", "missing", "fields"])
def test_every_bad_clip_is_named_with_its_file_and_line(corpus: Path, tmp_path: Path, case: str) -> None:
    folder = _copy(corpus, tmp_path)
    speech, rate = _speech(corpus)
    lines = (folder / "metadata.csv").read_text().splitlines()
    expected = {
        "unreadable": r"metadata.csv:3 \(clip0002.wav\): not readable audio",
        "short": r"metadata.csv:3 \(clip0002.wav\): 0.\d\d s of speech after trimming silence, under min_seconds=0.5",
        "long": r"metadata.csv:3 \(clip0002.wav\): \d+.\d s of speech, over max_seconds=15; split it",
        "silent": r"metadata.csv:3 \(clip0002.wav\): silent",
        "clipped": r"metadata.csv:3 \(clip0002.wav\): clipped \(\d+.\d\d% of samples at full scale",
        "empty text": r"metadata.csv:3 \(clip0002.wav\): empty text",
        "characters": r"metadata.csv:3 \(clip0002.wav\): the English front end cannot read '☃'",
        "language": r"metadata.csv:3 \(clip0002.wav\): '今天天气很好。' is not en text",
        "missing": r"metadata.csv:3 \(clip0002.wav\): the audio file .*clip0002.wav is not there",
        "fields": r"metadata.csv:3: 5 fields",
    }[case]
    if case == "unreadable":
        (folder / "wavs" / "clip0002.wav").write_bytes(b"RIFF not really a wave file")
    elif case == "short":
        _write(folder, "clip0002", np.sin(np.arange(int(0.3 * rate)) * 0.1) * 0.5)  # 0.3 s of tone
    elif case == "long":
        _write(folder, "clip0002", np.tile(speech, 8))
    elif case == "silent":
        _write(folder, "clip0002", np.zeros_like(speech))
    elif case == "clipped":
        _write(folder, "clip0002", np.clip(speech * 40, -1, 1))
    elif case == "missing":
        (folder / "wavs" / "clip0002.wav").unlink()
    else:
        text = {"empty text": "", "characters": "Snow ☃ falls.", "language": "今天天气很好。",
                "fields": "a|b|c|d"}[case]
        lines[2] = f"clip0002|{text}"
        (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    hint = "" if case == "fields" else r".*bad_clips='skip'"  # a malformed transcript is not one clip to skip
    with pytest.raises(BadClipError, match=expected + hint):
        SpeechDataProcessor(lang="en").prepare(str(folder))


def test_skipped_clips_are_counted_and_too_many_stop_the_run(corpus: Path, tmp_path: Path) -> None:
    folder = _copy(corpus, tmp_path)
    speech, _ = _speech(corpus)
    _write(folder, "clip0002", np.zeros_like(speech))
    prepared = SpeechDataProcessor(lang="en", bad_clips="skip", max_bad_fraction=0.2).prepare(str(folder))
    assert prepared.details["clips"] == 9 and prepared.details["bad_clips"] == 1
    assert "clip0002.wav): silent" in prepared.details["bad_clip_reasons"][0]
    _write(folder, "clip0003", np.zeros_like(speech))
    _write(folder, "clip0004", np.zeros_like(speech))
    with pytest.raises(BadClipError, match=r"3 of 10 clips are bad, more than max_bad_fraction=0.2"):
        SpeechDataProcessor(lang="en", bad_clips="skip", max_bad_fraction=0.2).prepare(str(folder))


def test_upsampled_clips_are_warned_about(corpus: Path, tmp_path: Path) -> None:
    folder = write_espeak_corpus(tmp_path / "low", "en", count=4, rate=16000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepared = SpeechDataProcessor(lang="en", sample_rate=22050, val_fraction=0.25).prepare(str(folder))
    assert prepared.details["upsampled_clips"] == 4
    assert any("below 22050 Hz and upsampled" in str(w.message) for w in caught)


def test_mandarin_corpus_reads_with_the_zh_front_end(tmp_path: Path) -> None:
    folder = write_espeak_corpus(tmp_path / "zh", "zh-cn", count=4)
    prepared = SpeechDataProcessor(lang="zh-cn", val_fraction=0.25).prepare(str(folder))
    assert prepared.details["clips"] == 4 and prepared.spec.extra["lang"] == "zh-cn"
    with pytest.raises(BadClipError, match=r"metadata.csv:1 \(clip0000.wav\): '你好，世界。' is not en text"):
        SpeechDataProcessor(lang="en").prepare(str(folder))
