"""Text front ends, offline: ``phonemize`` turns a sentence into phones with tones and languages
(``Phonemes``) for ``zh-cn`` (cn2an, jieba, pypinyin) and ``en`` (CMU dictionary, espeak-ng)."""

from __future__ import annotations

from twinkle_audio.text.phonemes import FrontEndError, Phonemes
from twinkle_audio.text.symbols import LANGUAGES, SYMBOLS


def phonemize(text: str, lang: str) -> Phonemes:
    """``text`` in language ``lang`` as phones, tones and languages.

    Raises:
        FrontEndError: an unknown language, empty text, or characters the front end cannot read (named).
    """
    from twinkle_audio.text import chinese, english

    front_ends = {"zh-cn": chinese.phonemize, "en": english.phonemize}
    if lang not in front_ends:
        raise FrontEndError(f"no front end for lang={lang!r}; choose one of {', '.join(LANGUAGES)}")
    if not text or not text.strip():
        raise FrontEndError("the text is empty")
    result = front_ends[lang](text)
    if not any(language for language in result.languages):
        raise FrontEndError(f"{text!r} has nothing to pronounce in {lang}")
    return result


__all__ = ["FrontEndError", "LANGUAGES", "Phonemes", "SYMBOLS", "phonemize"]
