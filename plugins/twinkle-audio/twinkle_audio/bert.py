"""``BertFeatures``: MeloTTS's optional BERT features — a frozen BERT from a local folder reads the words a
front end read, and each phone gets its word's hidden state (the mean over the word's sub-word tokens; zeros
for punctuation). Off by default; only ever loaded from a local folder, never downloaded."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from twinkle_audio.text import Phonemes
from twinkle_core.errors import TwinkleError


class BertFeatures:
    """A BERT (any ``transformers`` encoder with a fast tokenizer) from the local folder ``path``, frozen.

    Not an ``nn.Module`` of the voice on purpose: its weights stay in their folder, not in every checkpoint.

    Raises:
        TwinkleError: ``path`` is not a local folder holding a model and a fast tokenizer.
    """

    def __init__(self, path: str) -> None:
        """Load the tokenizer and the model (``local_files_only``; no remote code)."""
        if not os.path.isdir(path):
            raise TwinkleError(f"bert={path!r} is not a local folder; BERT features load only from a folder holding "
                               "a saved model and tokenizer (save_pretrained), never from the network")
        from transformers import AutoModel, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, use_fast=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        except (OSError, ValueError) as error:
            raise TwinkleError(f"bert={path!r} holds no loadable model and tokenizer ({error}); save both there "
                               "with save_pretrained") from None
        if not getattr(self.tokenizer, "is_fast", False):
            raise TwinkleError(f"bert={path!r}: its tokenizer is not a fast one, which maps tokens to words")
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.path = path

    @property
    def channels(self) -> int:
        """The hidden size of each phone's feature."""
        return int(self.model.config.hidden_size)

    @torch.no_grad()
    def phone_features(self, sentences: Sequence[Phonemes], width: int, device: Any = None) -> torch.Tensor:
        """``[B, width, channels]``: for each sentence's phones (0-padded to ``width``), its word's feature."""
        model = self.model.to(device) if device is not None else self.model
        out = torch.zeros(len(sentences), width, self.channels, device=device)
        for row, phonemes in enumerate(sentences):
            if not phonemes.words:
                continue
            encoded = self.tokenizer(list(phonemes.words), is_split_into_words=True, return_tensors="pt",
                                     truncation=True)
            hidden = model(**{k: v.to(device) for k, v in encoded.items()}).last_hidden_state[0]
            words = encoded.word_ids(0)
            per_word = torch.zeros(len(phonemes.words), self.channels, device=device)
            counts = torch.zeros(len(phonemes.words), 1, device=device)
            for position, word in enumerate(words):
                if word is not None:
                    per_word[word] += hidden[position]
                    counts[word] += 1
            per_word = per_word / counts.clamp_min(1)
            for column, word in enumerate(phonemes.word_of[:width]):
                if word >= 0:
                    out[row, column] = per_word[word]
        return out
