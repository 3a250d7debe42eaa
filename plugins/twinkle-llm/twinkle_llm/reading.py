"""Reading text data at any fsspec URI: ``.txt`` files (one document each), JSONL lines and Parquet rows (one
record each), or a folder of them — in a stable order, every record with its file and line, every problem a
named error that points at both. A Hugging Face dataset folder (``save_to_disk``'s, or the Hub's Parquet layout:
``twinkle_core.data.open_hf_dataset``) gives its rows as records — its train split for training, its test split
(else validation, else train) for an evaluation — each with its shard and row number."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

from twinkle_core.data import (DataError, EmptyDataError, MissingColumnError, Reader, UnsupportedFormatError,
                               is_hf_dataset, open_hf_dataset)

FORMATS = (".txt", ".jsonl", ".parquet")
"""The file kinds raw text comes in."""

RECORD_FORMATS = (".jsonl", ".parquet")
"""The file kinds records (conversations, preference pairs) come in."""


@dataclass
class Document:
    """One text and where it came from (``file`` and ``line``; line 0 for a whole file)."""

    text: str
    file: str
    line: int = 0


@dataclass
class Row:
    """One JSONL line or Parquet row (``values``) and where it came from."""

    values: dict[str, Any]
    file: str
    line: int

    def where(self) -> str:
        """``file, line N`` for messages."""
        return f"{self.file}, line {self.line}"

    def text(self, name: str, hint: str = "") -> str:
        """The non-empty text field ``name``.

        Raises:
            MissingColumnError: no such field (the message lists the row's fields and ``hint``).
            DataError: a field that is not text, or only whitespace.
        """
        if name not in self.values:
            raise MissingColumnError(f"{self.where()}: no field '{name}' (found: {', '.join(map(str, self.values))})"
                                     f"{hint}")
        return text_value(self.values[name], f"{self.where()}: '{name}'")


def text_value(value: object, what: str) -> str:
    """``value`` when it is text that is not blank.

    Raises:
        DataError: naming ``what`` (``file, line N: 'field'``).
    """
    if not isinstance(value, str):
        raise DataError(f"{what} is {type(value).__name__}, not text")
    if not value.strip():
        raise DataError(f"{what} is empty; remove the line or give it text")
    return value


def decode_utf8(data: bytes, path: str) -> str:
    """``data`` as UTF-8 text.

    Raises:
        DataError: naming the file, the line and the byte offset of the first invalid byte.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: bytes that are not UTF-8 ({data[err.start:err.start + 4]!r} at "
                        f"byte {err.start}); save the file as UTF-8") from err


def source_files(uri: str, formats: tuple[str, ...], what: str) -> tuple[Reader, list[str]]:
    """The ``Reader`` of ``uri`` and its files of ``formats`` (``uri`` itself when it is a file).

    Raises:
        UnsupportedFormatError: a file of another kind; EmptyDataError: a folder without any.
    """
    reader = Reader(uri)
    if not reader.folder and not uri.lower().endswith(formats):
        raise UnsupportedFormatError(f"cannot read '{uri}' as {what}: expected {', '.join(formats)} or a folder of "
                                     "them")
    paths = reader.files(*formats) if reader.folder else reader.files()
    if not paths:
        raise EmptyDataError(f"'{uri}' holds no {', '.join(formats)} files")
    return reader, paths


def rows(reader: Reader, path: str, example: str) -> Iterator[Row]:
    """Every record of the JSONL or Parquet file ``path`` (read once through ``reader``).

    Raises:
        DataError: a JSONL line that is not valid JSON or not an object (the message shows ``example``), or
            non-UTF-8 bytes.
    """
    data = reader.read(path)
    if path.lower().endswith(".jsonl"):
        for number, raw in enumerate(decode_utf8(data, path).splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except ValueError as err:
                raise DataError(f"{path}, line {number}: not valid JSON ({err.msg}); each line holds one object "
                                f"such as {example}") from err
            if not isinstance(value, dict):
                raise DataError(f"{path}, line {number}: a JSON {type(value).__name__}, not an object such as "
                                f"{example}")
            yield Row(value, path, number)
        return
    import pyarrow.parquet as pq

    for number, value in enumerate(pq.read_table(io.BytesIO(data)).to_pylist(), start=1):
        yield Row(value, path, number)


def dataset_rows(uri: str, evaluation: bool = False) -> Iterator[Row]:
    """The rows of a Hugging Face dataset folder's train split (``evaluation``: its test split, else validation,
    else train), streamed, each with its shard and row number."""
    dataset = open_hf_dataset(uri)
    split = dataset.evaluation_split() if evaluation else dataset.split()
    for values, shard, number in dataset.rows(split):
        yield Row(values, shard, number)


def read_records(uri: str, what: str, example: str, parse: Callable[[Row], T],
                 evaluation: bool = False) -> tuple[list[T], Reader]:
    """Every record of the JSONL or Parquet file(s) at ``uri`` (or of a Hugging Face dataset folder's split:
    ``dataset_rows``), in a stable order, each ``parse``d (``what`` names them in errors; ``example`` shows one).

    Raises:
        UnsupportedFormatError, EmptyDataError, DataError: naming the file and line.
    """
    if is_hf_dataset(uri):
        found = [parse(row) for row in dataset_rows(uri, evaluation)]
        if not found:
            raise EmptyDataError(f"'{uri}' holds no {what}")
        return found, Reader(uri)
    reader, paths = source_files(uri, RECORD_FORMATS, what)
    found = [parse(row) for path in paths for row in rows(reader, path, example)]
    if not found:
        raise EmptyDataError(f"'{uri}' holds no {what}")
    return found, reader


def read_documents(uri: str, text_field: str = "text", evaluation: bool = False) -> tuple[list[Document], Reader]:
    """Every document of ``uri`` in a stable order: a ``.txt`` file is one document, a JSONL line or a Parquet
    row is one (its ``text_field``); a folder holds any of them; a Hugging Face dataset folder's rows are
    (``dataset_rows``).

    Raises:
        UnsupportedFormatError: a file of another kind (or a folder without any).
        DataError: invalid JSON, a missing or non-string field, an empty text or non-UTF-8 bytes, naming the
            file and line.
    """
    hint = "; pass text_field=..."
    if is_hf_dataset(uri):
        documents = [Document(row.text(text_field, hint), row.file, row.line) for row in dataset_rows(uri, evaluation)]
        if not documents:
            raise EmptyDataError(f"'{uri}' holds no documents")
        return documents, Reader(uri)
    reader, paths = source_files(uri, FORMATS, "text")
    documents: list[Document] = []
    for path in paths:
        if path.lower().endswith(".txt"):
            text = decode_utf8(reader.read(path), path)
            if not text.strip():
                raise DataError(f"{path}: the file is empty; remove it or give it text")
            documents.append(Document(text, path))
            continue
        for row in rows(reader, path, f'{{"{text_field}": "..."}}'):
            documents.append(Document(row.text(text_field, hint), row.file, row.line))
    if not documents:
        raise EmptyDataError(f"'{uri}' holds no documents")
    return documents, reader
