"""Prediction rows and the files they go to — shared by ``Trainer.predict`` (a run's model, under Lightning) and
``twinkle_core.inference`` (an exported ONNX file under onnxruntime). Nothing here imports torch.

A row is one sample's JSON-ready prediction: for classification the predicted ``class``, its ``probability`` and
``p_<class>`` for every class (a softmax of the model's logits); for regression the ``prediction``. ``write_rows``
streams rows to CSV, Parquet or JSON lines, under a temporary name that is renamed when complete.
"""

from __future__ import annotations

import csv
import json
from typing import Any, Iterable, Sequence

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.uris import filesystem, suffix

CARD_KEY = "twinkle"
"""The ONNX ``metadata_props`` key of an export's inference card (JSON), written by the ONNX exporter and read by
``twinkle_core.inference``."""

FORMATS = ("csv", "parquet", "jsonl")
"""The files predictions are written to, by suffix."""

_PARQUET_ROWS = 10_000


def classification_rows(logits: Any, class_names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per sample of a classifier's logits (``N × C``, any array): ``class``, ``probability``, ``p_<class>``."""
    values = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=-1, keepdims=True)
    names = [str(c) for c in class_names] or [str(i) for i in range(values.shape[-1])]
    rows = []
    for sample in probabilities:
        best = int(sample.argmax())
        row: dict[str, Any] = {"class": names[best] if best < len(names) else str(best),
                               "probability": float(sample[best])}
        row.update({f"p_{name}": float(p) for name, p in zip(names, sample)})
        rows.append(row)
    return rows


def regression_rows(outputs: Any) -> list[dict[str, Any]]:
    """One row per sample of a regressor's outputs: its ``prediction`` (a list for several targets)."""
    flat = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    return [{"prediction": float(values[0]) if len(values) == 1 else values.tolist()} for values in flat]


def check_output(output: str, overwrite: bool) -> None:
    """Refuse an output of another format, or one that exists (unless ``overwrite``), before anything runs.

    Raises:
        TwinkleError: naming the path and the fix.
    """
    if suffix(output) not in FORMATS:
        raise TwinkleError(f"cannot write predictions to '{output}': name a file ending in "
                           f"{', '.join('.' + f for f in FORMATS)}")
    fs, path = filesystem(output)
    if fs.exists(path) and not overwrite:
        raise TwinkleError(f"'{output}' exists; pass overwrite=True (--overwrite) to replace it, or another path")


def write_rows(output: str, rows: Iterable[dict[str, Any]]) -> tuple[int, list[str]]:
    """Stream ``rows`` (dicts with the same keys) into ``output`` by its suffix — CSV, Parquet or JSON lines —
    under a temporary name, then renamed; returns the count and the columns."""
    fs, path = filesystem(output)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    temporary = f"{path}.partial"
    kind = suffix(output)
    count, columns = 0, []
    with fs.open(temporary, "wb" if kind == "parquet" else "w") as handle:
        if kind == "parquet":
            count, columns = _parquet(handle, rows)
        elif kind == "csv":
            writer = None
            for row in rows:
                if writer is None:
                    columns = list(row)
                    writer = csv.DictWriter(handle, fieldnames=columns)
                    writer.writeheader()
                writer.writerow(row)
                count += 1
        else:
            for row in rows:
                columns = columns or list(row)
                handle.write(json.dumps(row) + "\n")
                count += 1
    fs.mv(temporary, path)
    return count, columns


def _parquet(handle: Any, rows: Iterable[dict[str, Any]]) -> tuple[int, list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer, chunk, count = None, [], 0
    for row in rows:
        chunk.append(row)
        if len(chunk) == _PARQUET_ROWS:
            writer = _chunk(pa, pq, handle, writer, chunk)
            count, chunk = count + len(chunk), []
    if chunk or writer is None:
        writer = _chunk(pa, pq, handle, writer, chunk)
        count += len(chunk)
    columns = list(writer.schema.names)
    writer.close()
    return count, columns


def _chunk(pa: Any, pq: Any, handle: Any, writer: Any, chunk: list[dict[str, Any]]) -> Any:
    table = pa.Table.from_pylist(chunk)
    if writer is None:
        writer = pq.ParquetWriter(handle, table.schema)
    writer.write_table(table)
    return writer
