"""The Mandarin (zh-cn) front end, offline: numbers, dates and percentages read out (cn2an), words segmented
(jieba), pinyin with tones and tone sandhi (pypinyin), each syllable split into its initial and final with the
tone on the final; English words inside Chinese text go through the English front end (not dropped).
"""

from __future__ import annotations

import functools
import logging
import re

from twinkle_audio.text import english
from twinkle_audio.text.phonemes import FrontEndError, Phonemes
from twinkle_audio.text.symbols import ZH_FINALS, ZH_INITIALS, ZH_TONE_OFFSET

LANGUAGE = "zh-cn"
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_RUNS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+|[A-Za-z]+(?:'[A-Za-z]+)*|\s+|.", re.S)
_APICAL = {"z": "ii", "c": "ii", "s": "ii", "zh": "iii", "ch": "iii", "sh": "iii", "r": "iii"}
"""The written final ``i`` after these initials is the apical vowel, not /i/."""
_INITIALS, _FINALS = set(ZH_INITIALS), set(ZH_FINALS)


@functools.lru_cache(maxsize=1)
def _segmenter():  # noqa: ANN202 — jieba's module, its dictionary loaded once and quietly
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def normalize(text: str) -> str:
    """Arabic numbers, dates, percentages and signs as Chinese words (cn2an's ``an2cn`` transform)."""
    import cn2an

    if not re.search(r"\d", text):
        return text
    try:
        return cn2an.transform(text, "an2cn")
    except (ValueError, KeyError) as err:  # cn2an rejects some malformed numbers
        raise FrontEndError(f"cannot read the numbers in {text!r}: {err}; write them out in words") from None


def syllables(word: str) -> list[tuple[str, str, int]]:
    """``(initial, final, tone)`` of each character of a Chinese word, with pypinyin's tone sandhi (tone 5 is the
    neutral tone)."""
    from pypinyin import Style, lazy_pinyin

    initials = lazy_pinyin(word, Style.INITIALS, strict=True)
    finals = lazy_pinyin(word, Style.FINALS_TONE3, strict=True, neutral_tone_with_five=True, tone_sandhi=True)
    result = []
    for char, initial, final in zip(word, initials, finals):
        if not final or not final[-1].isdigit():
            raise FrontEndError(f"pypinyin has no reading for {char!r} (U+{ord(char):04X}) in {word!r}")
        tone, final = int(final[-1]), final[:-1].replace("ü", "v")
        if final == "i" and initial in _APICAL:
            final = _APICAL[initial]
        if (initial and initial not in _INITIALS) or final not in _FINALS:
            raise FrontEndError(f"{char!r} in {word!r} reads as {initial}{final}{tone}, outside the phone inventory")
        result.append((initial, final, tone))
    return result


def phonemize(text: str) -> Phonemes:
    """Mandarin ``text`` (Chinese characters, with English words and numbers mixed in) as phones.

    Raises:
        FrontEndError: characters with no reading (named, with where they are).
    """
    result = Phonemes()
    for run in _RUNS.findall(normalize(text)):
        if _HAN.match(run):
            for word in _segmenter().lcut(run):
                index = len(result.words)
                result.words.append(word)
                for initial, final, tone in syllables(word):
                    if initial:
                        result.add("zh:" + initial, ZH_TONE_OFFSET + tone, LANGUAGE, index)
                    result.add("zh:" + final, ZH_TONE_OFFSET + tone, LANGUAGE, index)
        else:
            try:
                result.extend(english.phonemize(run))
            except FrontEndError as err:
                raise FrontEndError(f"{err} (in the zh-cn text {text!r})") from None
    return result
