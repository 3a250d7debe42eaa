"""The offline text front ends: Mandarin with numbers, tone sandhi, apical vowels and English words mixed in;
English from the CMU dictionary, espeak-ng for words it lacks, numbers read out; named errors for what
neither can read; ``twinkle tts phonemize``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from twinkle_audio.text import FrontEndError, phonemize
from twinkle_audio.text.symbols import EN_TONE_OFFSET, PAD, SYMBOL_IDS, SYMBOLS


def test_the_inventory_is_fixed_and_unique() -> None:
    assert SYMBOLS[0] == PAD and len(set(SYMBOLS)) == len(SYMBOLS)
    assert {"zh:zh", "zh:iii", "zh:ii", "zh:v", "en:HH", "en:ZH", ",", "?"} <= set(SYMBOL_IDS)


def test_mandarin_has_tones_sandhi_and_initials_and_finals() -> None:
    result = phonemize("你好，世界", "zh-cn")
    assert str(result) == "zh:n/2 zh:i/2 zh:h/3 zh:ao/3 , zh:sh/4 zh:iii/4 zh:j/4 zh:ie/4"  # 3-3 sandhi: ni2 hao3
    assert result.words == ["你好", "世界"] and result.languages[4] == "" and set(result.languages) == {"zh-cn", ""}
    assert phonemize("资料", "zh-cn").phones[:2] == ["zh:z", "zh:ii"]  # the apical vowel after z/c/s
    assert phonemize("女儿", "zh-cn").phones[:2] == ["zh:n", "zh:v"]  # ü
    assert phonemize("吧", "zh-cn").tones == [5, 5]  # the neutral tone


def test_numbers_and_english_inside_chinese_are_read_not_dropped() -> None:
    result = phonemize("2024年我们用Python。", "zh-cn")
    assert "".join(result.words).startswith("二零二四年我们")  # the year read digit by digit (cn2an)
    assert " ".join(result.phones[:10]) == "zh:er zh:l zh:ing zh:er zh:s zh:ii zh:n zh:ian zh:uo zh:m"
    assert "Python" in result.words
    english = [p for p, lang in zip(result.phones, result.languages) if lang == "en"]
    assert english == ["en:P", "en:AY", "en:TH", "en:AA", "en:N"]
    assert result.phones[-1] == "."


def test_english_uses_the_dictionary_stress_and_numbers() -> None:
    result = phonemize("Hello, world!", "en")
    assert result.phones == ["en:HH", "en:AH", "en:L", "en:OW", ",", "en:W", "en:ER", "en:L", "en:D", "!"]
    assert result.tones[:4] == [EN_TONE_OFFSET, EN_TONE_OFFSET, EN_TONE_OFFSET, EN_TONE_OFFSET + 1]  # OW1 stressed
    assert phonemize("7 cats", "en").words == ["seven", "cats"]
    assert phonemize("1999", "en").words[:3] == ["one", "thousand", "nine"]


def test_words_the_dictionary_lacks_are_spelled_by_espeak_ng() -> None:
    from twinkle_audio.text.english import dictionary

    assert "zorblax" not in dictionary()
    phones = phonemize("zorblax", "en").phones
    assert phones[0] == "en:Z" and "en:B" in phones and phones[-1] == "en:S"


@pytest.mark.parametrize(("text", "lang", "message"), [
    ("", "en", "the text is empty"),
    ("   ", "zh-cn", "the text is empty"),
    ("hello ☃", "en", r"cannot read '☃' \(U\+2603\)"),
    ("你好☃", "zh-cn", r"cannot read '☃' \(U\+2603\).*in the zh-cn text"),
    ("你好", "fr", "no front end for lang='fr'; choose one of zh-cn, en"),
    ("...", "en", "nothing to pronounce"),
])
def test_what_a_front_end_cannot_read_is_named(text: str, lang: str, message: str) -> None:
    with pytest.raises(FrontEndError, match=message):
        phonemize(text, lang)


def test_twinkle_tts_phonemize() -> None:
    run = lambda *a: subprocess.run([sys.executable, "-m", "twinkle_core", "tts", "phonemize", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    shown = run("你好，世界", "--lang", "zh-cn")
    assert shown.returncode == 0 and "zh:n/2 zh:i/2 zh:h/3 zh:ao/3" in shown.stdout and "你好 | 世界" in shown.stdout
    data = json.loads(run("Hello", "--lang", "en", "--json").stdout)
    assert data["phones"] == ["en:HH", "en:AH", "en:L", "en:OW"] and data["phone_ids"][0] == SYMBOL_IDS["en:HH"]
    bad = run("hi ☃", "--lang", "en")
    assert bad.returncode == 1 and "cannot read '☃'" in bad.stderr and "Traceback" not in bad.stderr
