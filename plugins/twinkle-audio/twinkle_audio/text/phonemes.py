"""What a front end returns: phones with their tone and language, as symbols and as ids, and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field

from twinkle_audio.text.symbols import LANGUAGE_IDS, SYMBOL_IDS
from twinkle_core.errors import TwinkleError


class FrontEndError(TwinkleError):
    """Text a front end cannot read (characters it has no pronunciation for), named with the fix."""


@dataclass
class Phonemes:
    """A sentence as phones, each with a tone id and a language.

    Attributes:
        phones: language-prefixed phone symbols (``zh:n``, ``en:HH``) and punctuation.
        tones: one tone id per phone (see ``twinkle_audio.text.symbols``).
        languages: one language per phone (``zh-cn``, ``en``; ``""`` for punctuation and pauses).
        words: the words read, in order.
        word_of: for each phone, the index in ``words`` of the word it belongs to (-1 for punctuation and
            pauses) — how word-level features (BERT's) reach the phones.
    """

    phones: list[str] = field(default_factory=list)
    tones: list[int] = field(default_factory=list)
    languages: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    word_of: list[int] = field(default_factory=list)

    def add(self, phone: str, tone: int, language: str, word: int = -1) -> None:
        """Append one phone (of word number ``word``, or none)."""
        self.phones.append(phone)
        self.tones.append(tone)
        self.languages.append(language)
        self.word_of.append(word)

    def extend(self, other: Phonemes) -> None:
        """Append another sentence's phones (and words)."""
        self.phones += other.phones
        self.tones += other.tones
        self.languages += other.languages
        self.word_of += [w + len(self.words) if w >= 0 else -1 for w in other.word_of]
        self.words += other.words

    @property
    def phone_ids(self) -> list[int]:
        """The phones as symbol ids."""
        return [SYMBOL_IDS[p] for p in self.phones]

    @property
    def language_ids(self) -> list[int]:
        """The languages as ids (0 for punctuation)."""
        return [LANGUAGE_IDS.get(language, 0) for language in self.languages]

    def __len__(self) -> int:
        return len(self.phones)

    def __str__(self) -> str:
        """Phones with tones, e.g. ``zh:n/2 zh:i/2 , en:HH/6``."""
        return " ".join(f"{p}/{t}" if t else p for p, t in zip(self.phones, self.tones))
