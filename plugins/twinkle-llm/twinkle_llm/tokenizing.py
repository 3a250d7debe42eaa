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
        """A pretrained model folder's ``tokenizer.json``, with the ids where generation ends — as transformers and
        the servers built on it end it: every ``eos_token_id`` of ``generation_config.json`` and ``config.json``
        (one id or a list), the tokenizer's own ``eos_token`` (``tokenizer_config.json``), and the token that ends
        an assistant's turn in the folder's chat template (``<|im_end|>``, ``<|eot_id|>``). The end-of-text id (the
        one packing appends to every document) is the configs' first ``eos_token_id``, else the tokenizer's
        ``eos_token``, else ``<|endoftext|>``."""
        from tokenizers import Tokenizer

        from twinkle_llm.folders import tokenizer_file

        backend = Tokenizer.from_file(str(tokenizer_file(folder)))
        ids: dict[str, Any] = {}
        ends: list[int] = []
        for name in ("generation_config.json", "config.json"):
            path = Path(folder).expanduser() / name
            if path.is_file():
                found = json.loads(path.read_text())
                for key in ("eos_token_id", "pad_token_id"):
                    if ids.get(key) is None and found.get(key) is not None:
                        ids[key] = found[key]
                eos_ids = found.get("eos_token_id")
                ends += [int(i) for i in (eos_ids if isinstance(eos_ids, list) else [eos_ids]) if i is not None]
        named = _named_token(backend, folder, "eos_token")
        eos = ids.get("eos_token_id")
        if isinstance(eos, list):  # a list of end ids: the first is the end of text
            eos = eos[0] if eos else None
        if eos is None:
            eos = named if named is not None else backend.token_to_id(EOS)
        if eos is None:
            raise TwinkleError(f"'{folder}' names no end-of-text token: no eos_token_id in config.json or "
                               f"generation_config.json, no eos_token in tokenizer_config.json, no {EOS} token; "
                               "set eos_token_id in config.json")
        pad = ids.get("pad_token_id")
        pad = _named_token(backend, folder, "pad_token") if pad is None else pad
        tokenizer = cls(backend, int(eos), int(pad if pad is not None else eos), source=str(folder))
        turn_end = tokenizer.turn_end_id()
        tokenizer.end_ids = tuple(dict.fromkeys(i for i in (*ends, named, turn_end) if i is not None and i != eos))
        return tokenizer

    def turn_end_id(self) -> int | None:
        """The special token that ends an assistant's turn in this folder's chat template, if it has a template
        and the text after the answer starts with one of the tokenizer's special tokens."""
        from twinkle_llm.chat import ChatTemplate

        if not self.from_folder_source:
            return None
        template = ChatTemplate.for_folder(self.source, self.eos_text)
        if template.jinja is None:
            return None
        try:
            closing = template.turn_end()
        except Exception:  # noqa: BLE001 - a template that cannot render a probe: training names the problem
            return None
        ids = self.encode(closing) if closing else []
        special = {int(i) for i, token in self.backend.get_added_tokens_decoder().items() if token.special}
        return ids[0] if ids and ids[0] in special else None

    @classmethod
    def resolve(cls, given: str) -> TextTokenizer:
        """``ModelInput.tokenizer``: a folder holding ``tokenizer.json``, or a stored tokenizer's JSON text."""
        return cls.from_json(given) if given.lstrip().startswith("{") else cls.from_folder(given)


def _named_token(backend: Any, folder: str, key: str) -> int | None:
    """The id of the special token ``tokenizer_config.json`` names under ``key`` (``"eos_token"``: text, or an
    ``AddedToken`` dict with its ``content``), if the folder names one the tokenizer knows."""
    path = Path(folder).expanduser() / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except ValueError:
        return None
    value = config.get(key) if isinstance(config, dict) else None
    text = value.get("content") if isinstance(value, dict) else value
    found = backend.token_to_id(text) if isinstance(text, str) and text else None
    return int(found) if found is not None else None
