"""Held-out prompts taken from validation batches, for the generations a run writes at every validation.

A validation window of raw text (``causal_lm``) gives its first ``PREFIX_TOKENS`` tokens as the prompt and the
tokens after them as the reference. A window of conversations (``instruction_tuning``) or a preference pair
(``preference_tuning``) gives its first conversation up to the assistant's first labelled token as the prompt
and that answer as the reference (the chosen one, for a pair).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from twinkle_llm.data import IGNORE

PREFIX_TOKENS = 16
"""Tokens of a raw-text window that prompt its generation."""


@dataclass(frozen=True)
class Prompt:
    """A held-out prompt as token ids, and the ids the data continues it with."""

    ids: list[int]
    reference: list[int]


def document_start(positions: torch.Tensor | None, index: int) -> int:
    """Where the document holding token ``index`` starts in its window (position ids restart at 0 per document)."""
    if positions is None:
        return 0
    starts = (positions[: index + 1] == 0).nonzero().flatten()
    return int(starts[-1]) if len(starts) else 0


def prompt_of(ids: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor | None, task: str,
              reference_tokens: int) -> Prompt | None:
    """The prompt one window (or a pair's chosen sequence) holds; ``None`` when it holds none."""
    if task == "causal_lm":
        if len(ids) <= PREFIX_TOKENS:
            return None
        return Prompt(ids[:PREFIX_TOKENS].tolist(), ids[PREFIX_TOKENS:PREFIX_TOKENS + reference_tokens].tolist())
    labelled = (labels != IGNORE).nonzero().flatten()
    if not len(labelled) or int(labelled[0]) == 0:
        return None
    first = int(labelled[0])
    end = first
    while end < len(labels) and labels[end] != IGNORE:
        end += 1
    start = document_start(positions, first)
    return Prompt(ids[start:first].tolist(), ids[first:min(end, first + reference_tokens)].tolist())


def held_out_prompts(batch: Any, task: str, count: int, reference_tokens: int) -> list[Prompt]:
    """Up to ``count`` prompts from a validation batch (token ids, labels and, when packed, position ids)."""
    ids, labels = batch[0], batch[1]
    positions = batch[2] if len(batch) > 2 else None
    if ids.dim() == 3:  # preference pairs: the chosen answers
        ids, labels = ids[:, 0], labels[:, 0]
    prompts: list[Prompt] = []
    for row in range(len(ids)):
        if len(prompts) >= count:
            break
        found = prompt_of(ids[row].cpu(), labels[row].cpu(),
                          positions[row].cpu() if positions is not None else None, task, reference_tokens)
        if found is not None:
            prompts.append(found)
    return prompts
