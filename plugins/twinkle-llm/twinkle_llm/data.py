"""Raw text for causal language modelling: ``.txt`` files (one document each), JSONL or Parquet rows with a text
field, or a folder of them, at any fsspec URI — tokenized, and packed into windows of ``max_seq_len`` tokens
without attention across documents (position ids restart at every document, which transformers' Llama and Qwen
turn into a block-diagonal causal mask)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import TensorDataset

from twinkle_core.data import (
    DataError,
    DataProcessor,
    DataSpec,
    EmptyDataError,
    MissingColumnError,
    PreparedData,
    PrepareContext,
    Reader,
    UnsupportedFormatError,
)
from twinkle_core.errors import HyperparameterError
from twinkle_core.planning import Decision
from twinkle_core.types import Fraction, PositiveInt

from twinkle_llm.tokenizing import TextTokenizer

IGNORE = -100
"""The label of a token that is not predicted (a document's first token, padding): transformers' ignore index."""

FORMATS = (".txt", ".jsonl", ".parquet")


@dataclass
class Document:
    """One text and where it came from (``file`` and ``line``; line 0 for a whole file)."""

    text: str
    file: str
    line: int = 0


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: bytes that are not UTF-8 ({data[err.start:err.start + 4]!r} at "
                        f"byte {err.start}); save the file as UTF-8") from err


def read_documents(uri: str, text_field: str = "text") -> tuple[list[Document], Reader]:
    """Every document of ``uri`` in a stable order: a ``.txt`` file is one document, a JSONL line or a Parquet
    row is one (its ``text_field``); a folder holds any of them.

    Raises:
        UnsupportedFormatError: a file of another kind (or a folder without any).
        DataError: invalid JSON, a missing or non-string field, an empty text or non-UTF-8 bytes, naming the
            file and line.
    """
    reader = Reader(uri)
    paths = reader.files(*FORMATS) if reader.folder else reader.files()
    if not reader.folder and not uri.lower().endswith(FORMATS):
        raise UnsupportedFormatError(f"cannot read '{uri}' as text: expected {', '.join(FORMATS)} or a folder of them")
    if not paths:
        raise EmptyDataError(f"'{uri}' holds no {', '.join(FORMATS)} files")
    documents: list[Document] = []
    for path in paths:
        data = reader.read(path)
        if path.lower().endswith(".txt"):
            text = _decode(data, path)
            if not text.strip():
                raise DataError(f"{path}: the file is empty; remove it or give it text")
            documents.append(Document(text, path))
        elif path.lower().endswith(".jsonl"):
            for number, raw in enumerate(_decode(data, path).splitlines(), start=1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except ValueError as err:
                    raise DataError(f"{path}, line {number}: not valid JSON ({err.msg}); each line holds one "
                                    f"object such as {{\"{text_field}\": \"...\"}}") from err
                documents.append(Document(_field(row, text_field, path, number), path, number))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(io.BytesIO(data))
            if text_field not in table.column_names:
                raise MissingColumnError(f"{path}: no column '{text_field}' (columns: "
                                         f"{', '.join(table.column_names)}); pass text_field=...")
            for number, value in enumerate(table.column(text_field).to_pylist(), start=1):
                documents.append(Document(_field({text_field: value}, text_field, path, number), path, number))
    if not documents:
        raise EmptyDataError(f"'{uri}' holds no documents")
    return documents, reader


def _field(row: object, name: str, path: str, number: int) -> str:
    if not isinstance(row, dict) or name not in row:
        keys = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
        raise MissingColumnError(f"{path}, line {number}: no field '{name}' (found: {keys}); pass text_field=...")
    value = row[name]
    if not isinstance(value, str):
        raise DataError(f"{path}, line {number}: '{name}' is {type(value).__name__}, not text")
    if not value.strip():
        raise DataError(f"{path}, line {number}: '{name}' is empty; remove the line or give it text")
    return value


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


class TextProcessor(DataProcessor):
    """Raw text → packed token windows for ``causal_lm``.

    A run from scratch trains a byte-level BPE of ``vocab_size`` ids on the training split and stores it with the
    run (in its data spec); a model started from a local folder uses the folder's ``tokenizer.json``; a continued
    run keeps its parent's.
    """

    task = "causal_lm"
    formats = ("txt", "jsonl", "parquet", "folder")

    def __init__(self, max_seq_len: PositiveInt = 256, vocab_size: PositiveInt = 2048, val_fraction: Fraction = 0.1,
                 text_field: str = "text") -> None:
        """Configure the processor.

        Args:
            max_seq_len: tokens per training window (documents are packed into it).
            vocab_size: the size of the BPE trained from scratch (a pretrained tokenizer keeps its own).
            val_fraction: the share of documents held out for validation (of the tokens, when there is one
                document).
            text_field: the JSONL field or Parquet column holding the text.
        """
        super().__init__()
        if vocab_size < 259:
            raise HyperparameterError(f"vocab_size = {vocab_size} is too small: a byte-level BPE needs 256 byte "
                                      "tokens plus its special tokens; use at least 259")
        self.max_seq_len, self.vocab_size, self.val_fraction, self.text_field = (
            max_seq_len, vocab_size, val_fraction, text_field)

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, split by document, tokenize and pack."""
        context = self.context(context)
        documents, reader = read_documents(uri, self.text_field)
        order = np.random.default_rng(context.seed).permutation(len(documents))
        texts = [documents[i].text for i in order]
        if len(texts) >= 2:
            n_val = min(max(1, round(len(texts) * self.val_fraction)), len(texts) - 1)
            train_texts, val_texts = texts[n_val:], texts[:n_val]
            split = f"{len(train_texts)} documents for training, {len(val_texts)} held out"
        else:
            train_texts, val_texts = texts, []
            split = "one document: its last tokens are held out"
        wanted = context.model_input.tokenizer if context.model_input is not None else None
        tokenizer = (TextTokenizer.resolve(wanted) if wanted
                     else TextTokenizer.train(train_texts, self.vocab_size))
        train_ids = tokenizer.encode_batch(train_texts)
        val_ids = tokenizer.encode_batch(val_texts)
        if not val_ids:
            cut = len(train_ids[0]) - max(self.max_seq_len, round(len(train_ids[0]) * self.val_fraction))
            if cut < self.max_seq_len:
                raise EmptyDataError(f"'{uri}' is one document of {len(train_ids[0])} tokens: too short to hold out "
                                     f"a window of {self.max_seq_len} for validation; give more text or several "
                                     "documents")
            train_ids, val_ids = [train_ids[0][:cut]], [train_ids[0][cut:]]
        train = pack(train_ids, tokenizer.eos_id, tokenizer.pad_id, self.max_seq_len)
        val = pack(val_ids, tokenizer.eos_id, tokenizer.pad_id, self.max_seq_len)
        stored = tokenizer.source if tokenizer.from_folder_source else tokenizer.to_json()
        spec = DataSpec(task=self.task, input_shape=(self.max_seq_len,), input_dtype="int64",
                        vocab_size=tokenizer.vocab_size,
                        extra={"tokenizer": stored, "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id,
                               "max_seq_len": self.max_seq_len})
        origin = {"trained": f"a byte-level BPE of {tokenizer.vocab_size} ids trained on the training split",
                  "stored": f"the tokenizer the parent run trained ({tokenizer.vocab_size} ids): the ids keep their "
                            "meaning"}.get(tokenizer.source, f"{tokenizer.source}'s own ({tokenizer.vocab_size} ids)")
        decisions = [
            Decision("tokenizer", tokenizer.vocab_size, origin),
            Decision("packing", round(train.efficiency, 4),
                     f"{train.tokens:,} training tokens in {len(train.input_ids)} windows of {self.max_seq_len}: "
                     f"{train.efficiency:.1%} of the slots hold text, documents never attend to each other"),
        ]
        details = {"documents": len(documents), "split": split, "train_tokens": train.tokens,
                   "val_tokens": val.tokens, "packing_efficiency": round(train.efficiency, 4),
                   "tokenizer": tokenizer.source}
        manifest = reader.manifest()
        return PreparedData(train.dataset(), val.dataset(), spec, f"md5:{manifest.md5}", uri,
                            sum(size for size, _ in manifest.files.values()), details=details, manifest=manifest,
                            decisions=decisions)
