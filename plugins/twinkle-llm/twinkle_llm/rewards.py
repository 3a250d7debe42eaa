"""twinkle-llm's rewards (``register_rewards``): verifiable checks of a completion against its prompt's row.

- ``exact_answer`` (``ExactAnswer``): 1 when the completion's answer is the row's ``answer``, else 0 — numerically
  when the expected answer is a number (``"42"`` matches ``"… so 42."`` and ``"42.0"``), as text otherwise;
- ``format`` (``FormatMatch``): 1 when the completion matches a regular expression, else 0;
- ``length_penalty`` (``LengthPenalty``): 0 up to ``limit`` characters, then minus the excess over ``limit``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle_core.rewards import Reward, RewardError

NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d+)*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
"""A number as completions write it (``-3``, ``1,234.5``, ``.5``, ``2e3``)."""
MARKERS = ("####", "answer:", "answer is")
"""Where a completion states its answer (the last one found wins): GSM8K's ``####``, ``Answer:``, "the answer is"."""


def _as_number(text: str) -> float | None:
    """``text`` as a number (thousands separators dropped), or ``None``."""
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def stated_answer(completion: str) -> str:
    """The part of ``completion`` that states its answer: after the last marker (``MARKERS``), else all of it."""
    lowered, start = completion.lower(), -1
    for marker in MARKERS:
        at = lowered.rfind(marker)
        if at >= 0 and at + len(marker) > start:
            start = at + len(marker)
    return (completion[start:] if start >= 0 else completion).strip()


class ExactAnswer(Reward):
    """1 when the completion's answer equals the row's ``field`` (default ``answer``), else 0. A number is compared
    as a number: the last number of the stated answer (``stated_answer``) within ``tolerance``; text is compared
    whole, ignoring case and surrounding spaces and full stops."""

    def __init__(self, field: str = "answer", tolerance: float = 1e-6) -> None:
        self.field, self.tolerance = field, float(tolerance)

    def __call__(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[float]:
        scores = []
        for completion, row in zip(completions, rows):
            if self.field not in row:
                raise RewardError(f"exact_answer compares with the prompt row's '{self.field}', which this row "
                                  f"lacks (it has {', '.join(sorted(row)) or 'nothing'}); give each prompt an "
                                  f"'{self.field}' or pass field=")
            expected, stated = str(row[self.field]).strip(), stated_answer(completion)
            number = _as_number(expected)
            if number is not None:
                found = NUMBER.findall(stated)
                value = _as_number(found[-1]) if found else None
                close = value is not None and abs(value - number) <= self.tolerance * max(1.0, abs(number))
                scores.append(float(close))
            else:
                scores.append(float(stated.strip(" .").lower() == expected.strip(" .").lower()))
        return scores


class FormatMatch(Reward):
    """1 when the completion matches ``pattern`` (a Python regular expression; whole, or anywhere with
    ``search=True``; ``.`` matches newlines), else 0."""

    def __init__(self, pattern: str, search: bool = False) -> None:
        try:
            self.pattern = re.compile(pattern, re.DOTALL)
        except re.error as err:
            raise RewardError(f"format: pattern {pattern!r} is not a regular expression ({err})") from None
        self.search = search

    def __call__(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[float]:
        match = self.pattern.search if self.search else self.pattern.fullmatch
        return [float(match(text) is not None) for text in completions]


class LengthPenalty(Reward):
    """0 for a completion of at most ``limit`` characters; past it, minus the excess as a share of ``limit``
    (twice the limit scores -1): a weight on it trades length against the other rewards."""

    def __init__(self, limit: int = 256) -> None:
        if int(limit) < 1:
            raise RewardError(f"length_penalty: limit={limit}; give the longest completion not penalised (≥ 1)")
        self.limit = int(limit)

    def __call__(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[float]:
        return [-max(0, len(text) - self.limit) / self.limit for text in completions]


__all__ = ["MARKERS", "NUMBER", "ExactAnswer", "FormatMatch", "LengthPenalty", "stated_answer"]
