"""Small real speech corpora generated offline with espeak-ng, for tests, examples and benchmarks: English
sentences, and Mandarin ones spoken from their pinyin (voice ``cmn-latn-pinyin``), written as a folder of WAV
clips with ``metadata.csv`` (``id|text``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from twinkle_core.errors import TwinkleError

EN_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.", "A model learns to speak from many small clips.",
    "Please call the office before noon.", "Seven green apples fell from the tree.",
    "The train leaves the station at nine.", "We measure the voice against the ground truth.",
    "Rain is expected later in the evening.", "She reads a book by the window every night.",
    "Turn left at the second light.", "The weather was warm and bright today.",
    "Small steps lead to large changes.", "He found the key under the blue mat.",
)
ZH_SENTENCES = (
    "你好，世界。", "今天天气很好。", "我们一起学习说话。", "这是一个测试句子。", "请在中午之前打电话。",
    "火车九点出发。", "她每天晚上读书。", "前面路口向左转。", "小步也能走得很远。", "钥匙在蓝色垫子下面。",
    "晚上可能会下雨。", "声音和真实录音比较。",
)


_SUBJECTS = ("the old man", "a young girl", "my brother", "the teacher", "our neighbor", "the small dog",
             "a tired driver", "the doctor", "her friend", "the farmer", "a quiet student", "the captain")
_VERBS = ("found", "painted", "carried", "opened", "cleaned", "watched", "sold", "fixed", "lost", "bought",
          "pushed", "counted")
_OBJECTS = ("a red box", "the heavy door", "two green chairs", "the broken clock", "a long letter",
            "the wooden boat", "six yellow cups", "the empty room", "a warm coat", "the silver key",
            "three white shirts", "the garden gate")
_TIMES = ("this morning", "last night", "before lunch", "after the rain", "on sunday", "in the evening",
          "at noon", "every week", "near the river", "by the window", "in the park", "at the station")


def english_sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct generated English sentences (subject, verb, object, time: up to 20,736), in a shuffled
    order fixed by ``seed`` — a corpus larger than the built-in sentences, and held-out text it never saw. Every
    word is in the CMU dictionary."""
    import itertools
    import random

    grid = list(itertools.product(_SUBJECTS, _VERBS, _OBJECTS, _TIMES))
    if not 0 < count <= len(grid):
        raise TwinkleError(f"english_sentences: count={count} must be between 1 and {len(grid)}")
    chosen = random.Random(seed).sample(grid, count)
    return [f"{' '.join(parts).capitalize()}." for parts in chosen]


def _espeak() -> str:
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise TwinkleError("espeak-ng is not installed (apt-get install espeak-ng); it generates the sample speech")
    return binary


def write_espeak_corpus(root: str | Path, lang: str = "en", count: int = 12, rate: int = 22050,
                        speed: int = 160, sentences: list[str] | tuple[str, ...] | None = None) -> Path:
    """Write ``count`` clips (cycling through ``sentences`` — by default the built-in ones of ``lang`` — with
    varied pitch) and ``metadata.csv`` under ``root``; returns ``root``."""
    from pypinyin import Style, lazy_pinyin

    sentences = sentences or {"en": EN_SENTENCES, "zh-cn": ZH_SENTENCES}[lang]
    root = Path(root)
    (root / "wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(count):
        text = sentences[index % len(sentences)]
        spoken = text if lang == "en" else " ".join(lazy_pinyin(text, Style.TONE3, neutral_tone_with_five=True))
        voice = "en-us" if lang == "en" else "cmn-latn-pinyin"
        key = f"clip{index:04d}"
        wav = root / "wavs" / f"{key}.wav"
        subprocess.run([_espeak(), "-v", voice, "-s", str(speed), "-p", str(35 + (index * 7) % 30), "-w", str(wav),
                        spoken], check=True, capture_output=True, timeout=60)
        if rate != 22050:  # espeak-ng speaks at 22050 Hz
            import soundfile

            from twinkle_audio.audio import resample

            samples, original = soundfile.read(wav, dtype="float32")
            soundfile.write(wav, resample(samples, original, rate), rate)
        lines.append(f"{key}|{text}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
