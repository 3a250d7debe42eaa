"""Tokenizers: a byte-level BPE trained on a run's training split (HF ``tokenizers``), stored with the run as
JSON, or a pretrained model folder's ``tokenizer.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle_core.errors import TwinkleError

EOS = "<|endoftext|>"
PAD = "<|pad|>"


@dataclass
class TextTokenizer:
    """A fast tokenizer with the ids a language model needs.

    Attributes:
        backend: the ``tokenizers.Tokenizer``.
        eos_id: the end-of-document id (appended to every document; generation stops at it).
        pad_id: the id that pads a batch (never a label).
        source: where it came from: ``"trained"`` (on this run's data), ``"stored"`` (with an earlier run: a
            continued one keeps its parent's) or the folder it was read from.
        end_ids: more ids that end generation (a folder's ``eos_token_id`` list: a chat model's end of turn).
    """

    backend: Any
    eos_id: int
    pad_id: int
    source: str = "trained"
    end_ids: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Every id that ends generation: ``eos_id`` first."""
        return tuple(dict.fromkeys((self.eos_id, *self.end_ids)))

    @property
    def vocab_size(self) -> int:
        """Ids lie in ``[0, vocab_size)``."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (no special tokens added)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` and each one's ``[start, end)`` characters in it."""
        encoding = self.backend.encode(text, add_special_tokens=False)
        return list(encoding.ids), [tuple(o) for o in encoding.offsets]

    @property
    def eos_text(self) -> str:
        """The text of the end-of-text token (a chat template ends the assistant's turn with it)."""
        return str(self.backend.id_to_token(self.eos_id))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text."""
        return [list(e.ids) for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (special tokens dropped)."""
        return str(self.backend.decode(list(ids), skip_special_tokens=True))

    @property
    def from_folder_source(self) -> bool:
        """Whether it is a model folder's (stored with a run by the folder's path, not as JSON)."""
        return self.source not in ("trained", "stored")

    def to_json(self) -> str:
        """The tokenizer as the JSON text ``tokenizer.json`` holds (stored in the run's data spec)."""
        return str(self.backend.to_str())

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> TextTokenizer:
        """A byte-level BPE of ``vocab_size`` ids trained on ``texts`` (every byte representable: no unknown
        token), with ``<|endoftext|>`` and ``<|pad|>`` as ids 0 and 1."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        backend.train_from_iterator(texts, trainer)
        return cls(backend, backend.token_to_id(EOS), backend.token_to_id(PAD))

    @classmethod
    def from_json(cls, text: str) -> TextTokenizer:
        """A tokenizer stored with a run (``to_json``)."""
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(text)
        eos, pad = backend.token_to_id(EOS), backend.token_to_id(PAD)
        if eos is None:
            raise TwinkleError(f"the stored tokenizer has no {EOS} token; it was not written by twinkle-llm")
        return cls(backend, eos, pad if pad is not None else eos, source="stored")

    @classmethod
    def from_folder(cls, folder: str) -> TextTokenizer:
        """A pretrained model folder's ``tokenizer.json``, with the end-of-text and padding ids its
        ``config.json`` (or ``generation_config.json``) names."""
        from tokenizers import Tokenizer

        from twinkle_llm.folders import tokenizer_file

        backend = Tokenizer.from_file(str(tokenizer_file(folder)))
        ids: dict[str, Any] = {}
        for name in ("generation_config.json", "config.json"):
            path = Path(folder).expanduser() / name
            if path.is_file():
                found = json.loads(path.read_text())
                for key in ("eos_token_id", "pad_token_id"):
                    if ids.get(key) is None and found.get(key) is not None:
                        ids[key] = found[key]
        eos = ids.get("eos_token_id")
        ends = tuple(int(i) for i in eos) if isinstance(eos, list) else ()
        eos = eos[0] if isinstance(eos, list) else eos
        if eos is None:
            eos = backend.token_to_id(EOS)
        if eos is None:
            raise TwinkleError(f"'{folder}' names no eos_token_id in config.json or generation_config.json")
        pad = ids.get("pad_token_id")
        return cls(backend, int(eos), int(pad if pad is not None else eos), source=str(folder), end_ids=ends)

    @classmethod
    def resolve(cls, given: str) -> TextTokenizer:
        """``ModelInput.tokenizer``: a folder holding ``tokenizer.json``, or a stored tokenizer's JSON text."""
        return cls.from_json(given) if given.lstrip().startswith("{") else cls.from_folder(given)
