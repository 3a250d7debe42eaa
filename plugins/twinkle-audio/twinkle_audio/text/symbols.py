"""The phone, tone and language inventory every model of twinkle-audio is built over (fixed: a checkpoint's
embedding tables index it, so symbols are only ever appended).

Phones are Mandarin initials and finals (pypinyin's strict scheme; ``ii`` is the apical vowel after z/c/s and
``iii`` after zh/ch/sh/r), English ARPAbet phones without stress, punctuation and the pad. Tones are shared
ids: 0 for pad and punctuation, 1–5 for Mandarin's four tones and the neutral tone, 6–8 for English stress 0–2
(MeloTTS's scheme of per-language tone offsets).
"""

from __future__ import annotations

PAD = "_"
PUNCTUATION = (",", ".", "!", "?", "-", "…", "'", ";", ":")
"""Punctuation kept as phones (pauses and intonation); other marks are mapped onto these."""
ZH_INITIALS = ("b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "zh", "ch", "sh", "r", "z",
               "c", "s")
ZH_FINALS = ("a", "o", "e", "ai", "ei", "ao", "ou", "an", "en", "ang", "eng", "ong", "er", "i", "ia", "ie", "iao",
             "iou", "ian", "in", "iang", "ing", "iong", "u", "ua", "uo", "uai", "uei", "uan", "uen", "uang", "ueng",
             "v", "ve", "van", "vn", "ii", "iii", "io", "m", "n", "ng", "ê")
EN_PHONES = ("AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH", "IY",
             "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y",
             "Z", "ZH")

SYMBOLS: tuple[str, ...] = (PAD, *PUNCTUATION, *dict.fromkeys(("zh:" + p for p in ZH_INITIALS + ZH_FINALS)),
                            *("en:" + p for p in EN_PHONES))
"""Every phone, language-prefixed (``zh:sh``, ``en:SH``) so the two languages never share an embedding."""
SYMBOL_IDS = {symbol: index for index, symbol in enumerate(SYMBOLS)}

LANGUAGES = ("zh-cn", "en")
"""Languages with a front end; language ids are 1 + their index (0 is the pad)."""
LANGUAGE_IDS = {name: index + 1 for index, name in enumerate(LANGUAGES)}
ZH_TONE_OFFSET = 0
"""Mandarin tone t (1–5) has id t."""
EN_TONE_OFFSET = 6
"""English stress s (0–2) has id 6 + s."""
NUM_TONES = 9
NUM_LANGUAGES = len(LANGUAGES) + 1
