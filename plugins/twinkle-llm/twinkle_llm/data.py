"""The data processors of twinkle-llm: raw text for ``causal_lm`` (``TextProcessor``) and conversations for
``instruction_tuning`` (``ChatProcessor``), at any fsspec URI — tokenized, and packed into windows of
``max_seq_len`` tokens without attention across documents (position ids restart at every document, which
transformers' Llama and Qwen turn into a block-diagonal causal mask)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from twinkle_core.data import (HF_FORMAT, DataError, DataProcessor, DataSpec, EmptyDataError, PreparedData,
                               PrepareContext, Reader, Samples)
from twinkle_core.errors import HyperparameterError
from twinkle_core.planning import Decision
from twinkle_core.types import Fraction, PositiveInt

from twinkle_llm.chat import DEFAULT_TEMPLATE, ChatTemplate, Messages, read_conversations, read_pairs
from twinkle_llm.reading import read_documents
from twinkle_llm.tokenizing import TextTokenizer

IGNORE = -100
"""The label of a token that is not predicted (a document's first token, padding): transformers' ignore index."""

TEXT_WINDOW_CAP = 1024
"""The longest window chosen for raw text on its own, as Hugging Face's ``run_clm`` chooses its blocks (1024, or
the model's own limit when lower); shorter when the documents are."""
TEXT_WINDOW_PERCENTILE = 95
"""Raw text's window holds this percentile of the documents whole (longer ones go on in the next window)."""
WINDOW_MULTIPLE = {"text": 64, "conversations": 16}
"""Windows chosen from the data are rounded up to a multiple of this many tokens."""


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (at least ``multiple``)."""
    return max(multiple, -(-n // multiple) * multiple)

@dataclass
class Packed:
    """Documents packed into windows: ``input_ids``, ``labels`` and ``position_ids`` (each ``[windows, L]``)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    tokens: int

    @property
    def efficiency(self) -> float:
        """The share of the windows' slots that hold a document's token (the rest is padding)."""
        return self.tokens / max(self.input_ids.numel(), 1)

    def dataset(self) -> TensorDataset:
        """``(input_ids, labels, position_ids)`` samples."""
        return TensorDataset(self.input_ids, self.labels, self.position_ids)


def pack(documents: list[list[int]], eos_id: int, pad_id: int, length: int) -> Packed:
    """Each document's ids and ``eos_id``, one after another, cut into windows of ``length``; a document cut by a
    window's end goes on in the next window as a sequence of its own. Position ids restart at 0 for every
    document (and every continuation); a document's first token is not a label (nothing before it belongs to it);
    the last window is padded (``pad_id``, label ``IGNORE``)."""
    ids, positions, labels = [], [], []
    for doc in documents:
        tokens = [*doc, eos_id]
        ids.extend(tokens)
        positions.extend(range(len(tokens)))
        labels.extend([IGNORE, *tokens[1:]])
    total = len(ids)
    windows = max(1, -(-total // length))
    padding = windows * length - total
    ids.extend([pad_id] * padding)
    positions.extend(range(padding))
    labels.extend([IGNORE] * padding)
    shape = (windows, length)
    input_ids = torch.tensor(ids, dtype=torch.int64).view(shape)
    label_ids = torch.tensor(labels, dtype=torch.int64).view(shape)
    position_ids = torch.tensor(positions, dtype=torch.int64).view(shape)
    # a window that starts inside a document: that part is a sequence of its own, positions from 0
    for row in range(1, windows):
        starts = (position_ids[row] == 0).nonzero()
        first = int(starts[0]) if len(starts) else length
        if first > 0:
            position_ids[row, :first] = torch.arange(first)
    return Packed(input_ids, label_ids, position_ids, total)


def pack_whole(samples: list[tuple[list[int], list[int]]], pad_id: int, length: int) -> Packed:
    """Samples (ids and labels, each at most ``length`` long) placed whole into windows of ``length``, in order:
    a sample that does not fit in what is left of a window starts the next one. Position ids restart at 0 for
    every sample; the rest of a window is padding (``pad_id``, label ``IGNORE``)."""
    rows: list[tuple[list[int], list[int], list[int]]] = []
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    for sample_ids, sample_labels in samples:
        if len(ids) + len(sample_ids) > length:
            rows.append((ids, labels, positions))
            ids, labels, positions = [], [], []
        ids, labels = ids + sample_ids, labels + sample_labels
        positions += list(range(len(sample_ids)))
    rows.append((ids, labels, positions))
    tokens = sum(len(row[0]) for row in rows)

    def padded(values: list[int], fill: list[int] | int) -> list[int]:
        rest = length - len(values)
        return values + (list(fill[:rest]) if isinstance(fill, list) else [fill] * rest)

    tail = list(range(length))
    return Packed(torch.tensor([padded(r[0], pad_id) for r in rows], dtype=torch.int64),
                  torch.tensor([padded(r[1], IGNORE) for r in rows], dtype=torch.int64),
                  torch.tensor([padded(r[2], tail) for r in rows], dtype=torch.int64), tokens)


class LanguageDataProcessor(DataProcessor):
    """What twinkle-llm's processors share: a split by record, the tokenizer (trained on the training split, a
    model folder's, or a continued run's), and a data spec that stores it.

    Subclasses set ``task`` and ``formats`` and implement ``prepare``.
    """

    truncate: bool = False
    """Whether a conversation longer than ``max_seq_len`` is cut (and counted) instead of refused."""

    def __init__(self, max_seq_len: PositiveInt | None = None, vocab_size: PositiveInt = 2048,
                 val_fraction: Fraction = 0.1) -> None:
        """Keep the settings every processor has (see the subclasses)."""
        super().__init__()
        if vocab_size < 259:
            raise HyperparameterError(f"vocab_size = {vocab_size} is too small: a byte-level BPE needs 256 byte "
                                      "tokens plus its special tokens; use at least 259")
        self.max_seq_len: int | None = max_seq_len
        self.vocab_size, self.val_fraction = vocab_size, val_fraction
        self.window_decision: Decision | None = None
        """How ``max_seq_len`` was chosen from the data when the user did not set it (shown in the plan)."""

    def size_window(self, lengths: list[int], what: str, context: PrepareContext, *,
                    percentile: float | None = None, cap: int | None = None) -> int:
        """``max_seq_len`` when the user set it; else chosen from the data's ``lengths`` (tokens of each of
        ``what``): the longest (or their ``percentile``), rounded up (``WINDOW_MULTIPLE``), at most ``cap`` and the
        model's own limit (``ModelInput.max_length``). The choice and its figures become a plan decision."""
        if self.max_seq_len is not None:
            return self.max_seq_len
        model = context.model_input
        limit = model.max_length if model is not None and model.max_length else None
        measured = int(np.percentile(lengths, percentile, method="higher")) if percentile else max(lengths)
        window = round_up(measured, WINDOW_MULTIPLE["text" if percentile else "conversations"])
        bounds = [b for b in (cap, limit) if b]
        if bounds and window > min(bounds):
            window = min(bounds)
        longest = max(lengths)
        basis = (f"{percentile:g} % of the {len(lengths)} {what} are at most {measured} tokens (the longest "
                 f"{longest}: longer ones go on in the next window)" if percentile
                 else f"the longest of the {len(lengths)} {what} is {longest} tokens")
        limits = []
        if cap and window == cap:
            limits.append(f"at most {cap} on its own")
        if limit and window == limit:
            limits.append(f"the model takes at most {limit}")
        self.window_decision = Decision(
            "max_seq_len", window, f"{basis}: rounded up to {window}" + (f" ({'; '.join(limits)})" if limits else "")
            + "; pin max_seq_len= to choose")
        self.max_seq_len = window
        return window

    def split(self, count: int, seed: int) -> tuple[list[int], list[int]]:
        """Indices of the training and held-out records (``val_fraction`` of them, at least one of each when
        there are two or more; none held out of one)."""
        order = [int(i) for i in np.random.default_rng(seed).permutation(count)]
        if count < 2:
            return order, []
        n_val = min(max(1, round(count * self.val_fraction)), count - 1)
        return order[n_val:], order[:n_val]

    def held_out(self, count: int, seed: int, uri: str, what: str) -> tuple[list[int], list[int]]:
        """``split`` of records that cannot be cut (conversations, pairs: ``what``): at least one is held out.

        Raises:
            EmptyDataError: a single record.
        """
        train_index, val_index = self.split(count, seed)
        if not val_index:
            raise EmptyDataError(f"'{uri}' holds one of its {what}; give at least two (one is held out)")
        return train_index, val_index

    def tokenizer(self, context: PrepareContext, train_texts: Iterable[str]) -> TextTokenizer:
        """The model's tokenizer (its folder's, or a continued run's) when it names one, else a byte-level BPE of
        ``vocab_size`` ids trained on ``train_texts`` (consumed only then: it may be a generator)."""
        wanted = context.model_input.tokenizer if context.model_input is not None else None
        return TextTokenizer.resolve(wanted) if wanted else TextTokenizer.train(train_texts, self.vocab_size)

    def finish(self, tokenizer: TextTokenizer, train: Dataset, val: Dataset, reader: Reader, uri: str,
               details: dict[str, Any], layout: Decision, extra: dict[str, Any] | None = None,
               input_shape: tuple[int, ...] | None = None) -> PreparedData:
        """The ``PreparedData`` of the splits: the spec stores the tokenizer (a folder's by its path, a trained one
        as JSON) and the shape of one sample's token ids (default: a window of ``max_seq_len``); the plan shows the
        tokenizer's origin and ``layout`` (how the tokens fill the windows)."""
        stored = tokenizer.source if tokenizer.from_folder_source else tokenizer.to_json()
        assert self.max_seq_len is not None  # sized by prepare
        spec = DataSpec(task=self.task, input_shape=input_shape or (self.max_seq_len,), input_dtype="int64",
                        vocab_size=tokenizer.vocab_size,
                        extra={"tokenizer": stored, "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id,
                               "max_seq_len": self.max_seq_len, **(extra or {})})
        origin = {"trained": f"a byte-level BPE of {tokenizer.vocab_size} ids trained on the training split",
                  "stored": f"the tokenizer the parent run trained ({tokenizer.vocab_size} ids): the ids keep their "
                            "meaning"}.get(tokenizer.source, f"{tokenizer.source}'s own ({tokenizer.vocab_size} ids)")
        decisions = [Decision("tokenizer", tokenizer.vocab_size, origin),
                     *([self.window_decision] if self.window_decision else []), layout]
        manifest = reader.manifest()
        return PreparedData(train, val, spec, f"md5:{manifest.md5}", uri,
                            sum(size for size, _ in manifest.files.values()),
                            details={**details, "tokenizer": tokenizer.source}, manifest=manifest,
                            decisions=decisions)

    def packed(self, tokenizer: TextTokenizer, train: Packed, val: Packed, reader: Reader, uri: str,
               details: dict[str, Any], extra: dict[str, Any] | None = None) -> PreparedData:
        """``finish`` for packed windows: the plan shows the packing efficiency."""
        layout = Decision("packing", round(train.efficiency, 4),
                          f"{train.tokens:,} training tokens in {len(train.input_ids)} windows of {self.max_seq_len}: "
                          f"{train.efficiency:.1%} of the slots hold text, documents never attend to each other")
        details = {**details, "train_tokens": train.tokens, "val_tokens": val.tokens,
                   "packing_efficiency": round(train.efficiency, 4)}
        return self.finish(tokenizer, train.dataset(), val.dataset(), reader, uri, details, layout, extra)

    @staticmethod
    def encoded(messages: Messages, where: str, tokenizer: TextTokenizer, template: ChatTemplate
                ) -> tuple[list[int], list[int]]:
        """The ids of one conversation rendered with ``template`` and its labels (the id where the assistant
        speaks, ``IGNORE`` elsewhere), whatever their length."""
        text, spans = template.with_spans(messages, where)
        ids, offsets = tokenizer.encode_offsets(text)
        labels = [token if any(start <= begin < end for start, end in spans) else IGNORE
                  for token, (begin, _) in zip(ids, offsets)]
        return ids, labels

    def fitted(self, ids: list[int], labels: list[int], where: str, truncated: list[str]
               ) -> tuple[list[int], list[int]]:
        """``ids`` and ``labels`` within ``max_seq_len``: cut (and counted in ``truncated``) with ``truncate``.

        Raises:
            DataError: longer than ``max_seq_len`` without ``truncate`` (named by file and line).
        """
        assert self.max_seq_len is not None
        if len(ids) > self.max_seq_len:
            if not self.truncate:
                raise DataError(f"{where}: the conversation is {len(ids)} tokens, longer than max_seq_len = "
                                f"{self.max_seq_len}; raise max_seq_len, shorten it, or pass truncate=True to cut "
                                "such conversations (they are counted)")
            truncated.append(where)
            ids, labels = ids[: self.max_seq_len], labels[: self.max_seq_len]
        return ids, labels

    def count_truncated(self, prepared: PreparedData, truncated: list[str], what: str) -> PreparedData:
        """``prepared`` with a ``truncate`` decision in its plan when ``fitted`` cut any of ``what``."""
        if truncated:
            prepared.decisions.append(Decision("truncate", len(truncated), f"{len(truncated)} {what} longer than "
                                               f"{self.max_seq_len} tokens were cut (first: {truncated[0]})"))
        return prepared

    def template(self, tokenizer: TextTokenizer) -> ChatTemplate:
        """The chat template of ``tokenizer``'s model folder, else the default one."""
        return ChatTemplate.for_folder(tokenizer.source if tokenizer.from_folder_source else None,
                                       tokenizer.eos_text)


class TextProcessor(LanguageDataProcessor):
    """Raw text → packed token windows for ``causal_lm``.

    A run from scratch trains a byte-level BPE of ``vocab_size`` ids on the training split and stores it with the
    run (in its data spec); a model started from a local folder uses the folder's ``tokenizer.json``; a continued
    run keeps its parent's.
    """

    task = "causal_lm"
    formats = ("txt", "jsonl", "parquet", "folder", HF_FORMAT)

    def __init__(self, max_seq_len: PositiveInt | None = None, vocab_size: PositiveInt = 2048,
                 val_fraction: Fraction = 0.1, text_field: str = "text") -> None:
        """Configure the processor.

        Args:
            max_seq_len: tokens per training window (documents are packed into it); default: sized from the data —
                the 95th percentile of the documents' lengths, rounded up to a multiple of 64, at most 1024 (as
                Hugging Face's ``run_clm``) and the model's own limit.
            vocab_size: the size of the BPE trained from scratch (a pretrained tokenizer keeps its own).
            val_fraction: the share of documents held out for validation (of the tokens, when there is one
                document).
            text_field: the JSONL field or Parquet column holding the text.
        """
        super().__init__(max_seq_len, vocab_size, val_fraction)
        self.text_field = text_field

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, split by document, tokenize and pack."""
        context = self.context(context)
        documents, reader = read_documents(uri, self.text_field)
        train_index, val_index = self.split(len(documents), context.seed)
        train_texts = [documents[i].text for i in train_index]
        val_texts = [documents[i].text for i in val_index]
        split = (f"{len(train_texts)} documents for training, {len(val_texts)} held out" if val_texts
                 else "one document: its last tokens are held out")
        tokenizer = self.tokenizer(context, train_texts)
        train_ids = tokenizer.encode_batch(train_texts)
        val_ids = tokenizer.encode_batch(val_texts)
        lengths = [len(ids) + 1 for ids in train_ids]  # each document ends with the end-of-text token
        if not val_ids and self.max_seq_len is None:  # one document: its held-out part must hold a window
            lengths = [max(8, min(lengths[0], round(lengths[0] * self.val_fraction)))]
        self.size_window(lengths, "training documents", context, percentile=TEXT_WINDOW_PERCENTILE,
                         cap=TEXT_WINDOW_CAP)
        assert self.max_seq_len is not None
        if not val_ids:
            cut = len(train_ids[0]) - max(self.max_seq_len, round(len(train_ids[0]) * self.val_fraction))
            if cut < self.max_seq_len:
                raise EmptyDataError(f"'{uri}' is one document of {len(train_ids[0])} tokens: too short to hold out "
                                     f"a window of {self.max_seq_len} for validation; give more text or several "
                                     "documents")
            train_ids, val_ids = [train_ids[0][:cut]], [train_ids[0][cut:]]
        train = pack(train_ids, tokenizer.eos_id, tokenizer.pad_id, self.max_seq_len)
        val = pack(val_ids, tokenizer.eos_id, tokenizer.pad_id, self.max_seq_len)
        return self.packed(tokenizer, train, val, reader, uri, {"documents": len(documents), "split": split})


    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Text read as the run read its held-out text: every document tokenized with the run's tokenizer (from
        its data spec) and packed into windows of its ``max_seq_len``; the tokens are their own targets, so the
        windows are labelled (``evaluate`` gives the per-token loss and perplexity). Ids are window numbers.
        ``targets=False`` (``predict``): each document is a prompt, its id its file and line.

        Raises:
            UnsupportedFormatError, DataError: as for training (the file, line and field named).
        """
        documents, reader = read_documents(uri, self.text_field, evaluation=True)
        if not targets:  # predict: each document is a prompt the model continues
            where = [f"{d.file}:{d.line}" if d.line else d.file for d in documents]
            return Samples([(d.text,) for d in documents], False, f"md5:{reader.manifest().md5}", uri, where,
                           {"documents": len(documents)})
        tokenizer = TextTokenizer.resolve(str(spec.extra["tokenizer"]))
        length = int(spec.extra.get("max_seq_len", spec.input_shape[0]))
        packed = pack(tokenizer.encode_batch([d.text for d in documents]), tokenizer.eos_id, tokenizer.pad_id, length)
        details = {"documents": len(documents), "tokens": packed.tokens, "windows": len(packed.input_ids)}
        return Samples(packed.dataset(), True, f"md5:{reader.manifest().md5}", uri,
                       [f"window {i + 1}" for i in range(len(packed.input_ids))], details)


class ChatProcessor(LanguageDataProcessor):
    """Conversations → packed token windows for ``instruction_tuning``, trained on the assistant's tokens only.

    Each record (``messages`` in the OpenAI chat shape, or ``prompt``/``response``) is rendered with the model
    folder's chat template, or the documented default (``twinkle_llm.chat``); its tokens are labels only where
    the assistant speaks. Conversations are packed whole (never cut across windows) with position ids restarting
    at each. The tokenizer is the model folder's, a continued run's, or a BPE trained on the training split.
    """

    task = "instruction_tuning"
    formats = ("jsonl", "parquet", "folder", HF_FORMAT)

    def __init__(self, max_seq_len: PositiveInt | None = None, vocab_size: PositiveInt = 2048,
                 val_fraction: Fraction = 0.1, truncate: bool = False) -> None:
        """Configure the processor.

        Args:
            max_seq_len: tokens per training window; a conversation longer than this is refused, naming its file
                and line (or cut, with ``truncate``). Default: sized from the data — the longest conversation,
                rounded up to a multiple of 16, at most the model's own limit.
            vocab_size: the size of the BPE trained from scratch (a pretrained tokenizer keeps its own).
            val_fraction: the share of conversations held out for validation.
            truncate: cut conversations longer than ``max_seq_len`` to it (counted in the plan) instead of
                refusing them.
        """
        super().__init__(max_seq_len, vocab_size, val_fraction)
        self.truncate = truncate

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, check, split by conversation, tokenize with the assistant's tokens as the only labels, pack."""
        context = self.context(context)
        conversations, reader = read_conversations(uri)
        train_index, val_index = self.held_out(len(conversations), context.seed, uri, "conversations")
        default = ChatTemplate(DEFAULT_TEMPLATE, "")
        tokenizer = self.tokenizer(context, (default.render(conversations[i].messages) for i in train_index))
        template = self.template(tokenizer)
        truncated: list[str] = []
        whole = [self.encoded(c.messages, c.where(), tokenizer, template) for c in conversations]
        self.size_window([len(ids) for ids, _ in whole], "conversations", context)
        encoded = [self.fitted(ids, labels, c.where(), truncated) for (ids, labels), c in zip(whole, conversations)]
        train = pack_whole([encoded[i] for i in train_index], tokenizer.pad_id, self.max_seq_len)
        val = pack_whole([encoded[i] for i in val_index], tokenizer.pad_id, self.max_seq_len)
        details = {"conversations": len(conversations),
                   "split": f"{len(train_index)} conversations for training, {len(val_index)} held out",
                   "truncated": len(truncated), "chat_template": template.source,
                   "trained_tokens": int((train.labels != IGNORE).sum())}
        prepared = self.packed(tokenizer, train, val, reader, uri, details, {"chat_template": template.source})
        return self.count_truncated(prepared, truncated, "conversations")


class PreferenceProcessor(LanguageDataProcessor):
    """Preference pairs → ``(token ids [2, L], labels [2, L])`` samples for ``preference_tuning`` (DPO): the prompt
    answered with the chosen answer, then with the rejected one, each rendered with the chat template and labelled
    on the answer's tokens only.

    Records hold ``prompt`` (text, or messages ending with the user's turn), ``chosen`` and ``rejected`` (text, or
    one assistant message each), as TRL's DPO data does. The two sequences of a pair are padded to the longest
    sequence of the data (at most ``max_seq_len``), not packed: DPO compares whole answers.
    """

    task = "preference_tuning"
    formats = ("jsonl", "parquet", "folder", HF_FORMAT)

    def __init__(self, max_seq_len: PositiveInt | None = None, vocab_size: PositiveInt = 2048,
                 val_fraction: Fraction = 0.1, truncate: bool = False) -> None:
        """Configure the processor.

        Args:
            max_seq_len: the longest prompt and answer; a longer one is refused, naming its file and line (or cut,
                with ``truncate``). Default: the longest sequence of the data, at most the model's own limit.
            vocab_size: the size of the BPE trained from scratch (a pretrained tokenizer keeps its own).
            val_fraction: the share of pairs held out for validation.
            truncate: cut sequences longer than ``max_seq_len`` (counted in the plan) instead of refusing them.
        """
        super().__init__(max_seq_len, vocab_size, val_fraction)
        self.truncate = truncate

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, check, split by pair, tokenize both answers of each pair with the answer as the only labels."""
        context = self.context(context)
        pairs, reader = read_pairs(uri)
        train_index, val_index = self.held_out(len(pairs), context.seed, uri, "preferences")
        default = ChatTemplate(DEFAULT_TEMPLATE, "")
        tokenizer = self.tokenizer(context, (default.render(m) for i in train_index for m in pairs[i].conversations()))
        template = self.template(tokenizer)
        truncated: list[str] = []
        whole = [[self.encoded(m, p.where(), tokenizer, template) for m in p.conversations()] for p in pairs]
        if self.max_seq_len is None:  # the pairs are padded to the longest sequence: only the model limits them
            model = context.model_input
            longest = max(len(ids) for sides in whole for ids, _ in sides)
            limit = model.max_length if model is not None and model.max_length else None
            self.max_seq_len = min(longest, limit) if limit else longest
            self.window_decision = Decision(
                "max_seq_len", self.max_seq_len,
                f"the longest of the {2 * len(pairs)} prompt-and-answer sequences is {longest} tokens"
                + (f"; the model takes at most {limit}" if limit and limit < longest else "")
                + "; pin max_seq_len= to choose")
        encoded = [[self.fitted(ids, labels, p.where(), truncated) for ids, labels in sides]
                   for p, sides in zip(pairs, whole)]
        for p, sides in zip(pairs, encoded):
            if any(all(label == IGNORE for label in labels) for _, labels in sides):
                raise DataError(f"{p.where()}: the prompt fills max_seq_len = {self.max_seq_len}, so nothing of an "
                                "answer is left after truncation; raise max_seq_len or shorten the prompt")
        length = max(len(ids) for sides in encoded for ids, _ in sides)

        def tensors(index: list[int]) -> TensorDataset:
            ids = torch.full((len(index), 2, length), tokenizer.pad_id, dtype=torch.int64)
            labels = torch.full((len(index), 2, length), IGNORE, dtype=torch.int64)
            for row, i in enumerate(index):
                for side, (side_ids, side_labels) in enumerate(encoded[i]):
                    ids[row, side, : len(side_ids)] = torch.tensor(side_ids)
                    labels[row, side, : len(side_labels)] = torch.tensor(side_labels)
            return TensorDataset(ids, labels)

        train, val = tensors(train_index), tensors(val_index)
        tokens = sum(len(ids) for i in train_index for ids, _ in encoded[i])
        fill = tokens / max(1, 2 * len(train_index) * length)
        layout = Decision("padding", length, f"each answer of a pair is one sequence, padded to the longest ({length} "
                                             f"tokens): {fill:.1%} of the slots hold text")
        details = {"pairs": len(pairs), "split": f"{len(train_index)} pairs for training, {len(val_index)} held out",
                   "truncated": len(truncated), "chat_template": template.source, "train_tokens": tokens}
        prepared = self.finish(tokenizer, train, val, reader, uri, details, layout,
                               {"chat_template": template.source}, input_shape=(2, length))
        return self.count_truncated(prepared, truncated, "sequences")


@dataclass
class RLPrompt:
    """One prompt of a reinforcement-learning data set: raw text to continue, or messages (ending with the user's
    turn) the assistant answers; ``fields``, every other field of its record, go to the rewards."""

    prompt: str | Messages
    fields: dict[str, Any]
    file: str
    line: int

    def where(self) -> str:
        """``file, line N`` for messages."""
        return f"{self.file}, line {self.line}"

    def row(self) -> dict[str, Any]:
        """What a reward sees: the record's other fields, and ``prompt`` as text (the last user turn of
        messages)."""
        text = self.prompt if isinstance(self.prompt, str) else str(self.prompt[-1]["content"])
        return {**self.fields, "prompt": text}


def rl_prompt(row: Any) -> RLPrompt:
    """The prompt of a record: ``prompt`` (text, or messages ending with the user's turn), the rest for rewards.

    Raises:
        MissingColumnError: no ``prompt``; DataError: an empty one, or messages in a wrong order.
    """
    from twinkle_llm.chat import check_messages

    value = row.values.get("prompt")
    prompt = check_messages(value, row.where(), complete=False) if isinstance(value, list) else row.text(
        "prompt", "; a prompt record holds 'prompt' (text or messages) and what its rewards compare with")
    return RLPrompt(prompt, {k: v for k, v in row.values.items() if k != "prompt"}, row.file, row.line)


class PromptBatch:
    """The collate function of prompts: token ids padded on the left (generation continues every row at the same
    position) with the attention mask, and the prompts' rows — ``(ids int64 [B, L], mask int64 [B, L], rows)``."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: list[tuple[list[int], dict[str, Any]]]) -> tuple[torch.Tensor, torch.Tensor, list]:
        length = max(len(ids) for ids, _ in items)
        ids = torch.full((len(items), length), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(items), length), dtype=torch.int64)
        for row, (tokens, _) in enumerate(items):
            ids[row, length - len(tokens):] = torch.tensor(tokens, dtype=torch.int64)
            mask[row, length - len(tokens):] = 1
        return ids, mask, [dict(fields) for _, fields in items]


class PromptDataset(Dataset):
    """Tokenized prompts and their rows (``PromptBatch`` collates them)."""

    def __init__(self, items: list[tuple[list[int], dict[str, Any]]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[list[int], dict[str, Any]]:
        return self.items[index]


class PromptProcessor(LanguageDataProcessor):
    """Prompts → ``(ids [B, L] left-padded, mask [B, L], rows)`` batches for ``reinforcement_learning``.

    Each record holds ``prompt`` — raw text the model continues, or messages ending with the user's turn, rendered
    with the model's chat template and its generation prompt, as TRL's GRPO data — and any other fields (an
    ``answer``, tests), which go to the rewards with the completion. The tokenizer is the model folder's (or a
    continued run's): reinforcement learning starts from a trained model.
    """

    task = "reinforcement_learning"
    formats = ("jsonl", "parquet", "folder", HF_FORMAT)

    def __init__(self, max_seq_len: PositiveInt | None = None, vocab_size: PositiveInt = 2048,
                 val_fraction: Fraction = 0.1) -> None:
        """Configure the processor.

        Args:
            max_seq_len: the longest prompt, in tokens; a longer one is refused, naming its file and line. Default:
                the longest prompt of the data.
            vocab_size: unused (the model's tokenizer is used); kept for the processors' shared settings.
            val_fraction: the share of prompts held out: validation answers them greedily and scores the answers.
        """
        super().__init__(max_seq_len, vocab_size, val_fraction)

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, check, split by prompt, tokenize each prompt (text as it is; messages in the chat template)."""
        from twinkle_llm.reading import read_records

        context = self.context(context)
        if context.model_input is None or not context.model_input.tokenizer:
            raise DataError(f"'{uri}': reinforcement learning samples from a trained model, whose tokenizer reads "
                            "the prompts: give weights='/path/to/hf-folder' (or continue a run)")
        prompts, reader = read_records(uri, "prompts", '{"prompt": "...", "answer": "..."}', rl_prompt)
        train_index, val_index = self.held_out(len(prompts), context.seed, uri, "prompts")
        tokenizer = self.tokenizer(context, ())
        template = self.template(tokenizer)
        encoded = []
        for p in prompts:
            text = p.prompt if isinstance(p.prompt, str) else template.render(p.prompt, add_generation_prompt=True)
            ids = tokenizer.encode(text)
            if not ids:
                raise DataError(f"{p.where()}: the prompt encodes to no tokens; give it text")
            encoded.append(ids)
        longest = max(len(ids) for ids in encoded)
        if self.max_seq_len is None:
            self.max_seq_len = longest
            self.window_decision = Decision("max_seq_len", longest, f"the longest of the {len(prompts)} prompts is "
                                            f"{longest} tokens; pin max_seq_len= to choose")
        for p, ids in zip(prompts, encoded):
            if len(ids) > self.max_seq_len:
                raise DataError(f"{p.where()}: the prompt is {len(ids)} tokens, longer than max_seq_len = "
                                f"{self.max_seq_len}; raise max_seq_len or shorten it")

        def dataset(index: list[int]) -> PromptDataset:
            return PromptDataset([(encoded[i], prompts[i].row()) for i in index])

        layout = Decision("padding", longest, f"prompts are padded on the left to the longest of their batch (at most "
                                              f"{longest} tokens); completions are sampled after them")
        details = {"prompts": len(prompts), "split": f"{len(train_index)} prompts for training, {len(val_index)} held "
                                                     "out", "chat_template": template.source,
                   "fields": sorted({k for p in prompts for k in p.fields})}
        prepared = self.finish(tokenizer, dataset(train_index), dataset(val_index), reader, uri, details, layout,
                               {"chat_template": template.source})
        prepared.collate_fn = PromptBatch(tokenizer.pad_id)
        return prepared

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Prompts read as the run read its own (its tokenizer and chat template, from its data spec), each id its
        file and line: ``evaluate`` (``targets``) scores the greedy answers with the run's rewards and gives pass@k;
        ``predict`` continues each prompt (its text, messages rendered with the template's generation prompt).

        Raises:
            MissingColumnError, DataError: a record without a prompt, or an empty one (file and line named).
        """
        from twinkle_llm.reading import read_records

        prompts, reader = read_records(uri, "prompts", '{"prompt": "...", "answer": "..."}', rl_prompt,
                                       evaluation=True)
        tokenizer = TextTokenizer.resolve(str(spec.extra["tokenizer"]))
        source = str(spec.extra.get("chat_template", DEFAULT_TEMPLATE))
        template = ChatTemplate.for_folder(None if source == DEFAULT_TEMPLATE else source, tokenizer.eos_text)
        texts = [p.prompt if isinstance(p.prompt, str) else template.render(p.prompt, add_generation_prompt=True)
                 for p in prompts]
        where = [f"{p.file}:{p.line}" for p in prompts]
        fingerprint = f"md5:{reader.manifest().md5}"
        if not targets:
            return Samples([(text,) for text in texts], False, fingerprint, uri, where, {"prompts": len(prompts)})
        items = [(tokenizer.encode(text) or [tokenizer.eos_id], p.row()) for text, p in zip(texts, prompts)]
        return Samples(PromptDataset(items), True, fingerprint, uri, where, {"prompts": len(prompts)},
                       PromptBatch(tokenizer.pad_id))
