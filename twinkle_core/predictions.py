"""Prediction rows and the files they go to — shared by ``Trainer.predict`` (a run's model, under Lightning) and
``twinkle_core.inference`` (an exported ONNX file under onnxruntime). Nothing here imports torch.

A row is one sample's JSON-ready prediction: for classification the predicted ``class``, its ``probability`` and
``p_<class>`` for every class (a softmax of the model's logits); for regression the ``prediction``; for detection
the image's ``width`` and ``height`` and its ``boxes``, each ``{"class", "score", "box": [x1, y1, x2, y2]}`` in the
image's pixels. A row value may be a ``PredictionFile`` (a synthesised WAV, an image with its boxes drawn): the
writer stores it beside the output and the row holds its path. ``write_rows`` streams rows to CSV, Parquet, JSON
lines or one JSON document (detections in COCO's shape), under a temporary name that is renamed when complete.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
import wave
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.uris import filesystem, suffix

CARD_KEY = "twinkle"
"""The ONNX ``metadata_props`` key of an export's inference card (JSON), written by the ONNX exporter and read by
``twinkle_core.inference``."""

FORMATS = ("csv", "parquet", "jsonl", "json")
"""The files predictions are written to, by suffix (``json``: detections as a COCO document, other rows as an array)."""


@dataclass(frozen=True)
class PredictionFile:
    """A file that belongs to a prediction row — a synthesised WAV, an image with its boxes drawn. ``predict``
    writes ``data`` into the folder ``<output's name>_files/`` beside the output as ``<n>-<name>`` (``n``: the
    sample's position, from 1) and the row holds that path, relative to the output's folder.

    Attributes:
        name: the file's name (with its suffix).
        data: its bytes.
    """

    name: str
    data: bytes

    @classmethod
    def wav(cls, samples: Any, rate: int, name: str = "speech.wav") -> PredictionFile:
        """Mono float samples in [-1, 1] as a 16-bit PCM WAV file (``wav_bytes``: what ``synthesize`` writes)."""
        return cls(name, wav_bytes(samples, rate))


def wav_bytes(samples: Any, rate: int) -> bytes:
    """Mono float samples in [-1, 1] as a 16-bit PCM WAV file's bytes (the standard library's ``wave``)."""
    pcm = (np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(rate))
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()


def files_folder(output: str) -> str:
    """The folder beside ``output`` that holds its rows' files: ``preds.csv`` → ``preds_files``."""
    stem = output.rsplit(".", 1)[0] if "." in output.rsplit("/", 1)[-1] else output
    return f"{stem}_files"

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


def draw_boxes(image: bytes, boxes: Sequence[dict[str, Any]], class_names: Sequence[str] = ()) -> bytes:
    """The image (encoded bytes of any format Pillow reads) with ``boxes`` (detection rows' boxes) drawn on it,
    each labelled with its class and score, one colour per class; returned as PNG, or JPEG for a JPEG image."""
    from PIL import Image, ImageDraw

    picture = Image.open(io.BytesIO(image))
    kind = "JPEG" if picture.format == "JPEG" else "PNG"
    picture = picture.convert("RGB")
    draw = ImageDraw.Draw(picture)
    palette = [(255, 56, 56), (72, 249, 10), (0, 194, 255), (255, 157, 151), (146, 204, 23), (132, 56, 255),
               (255, 178, 29), (207, 210, 49), (26, 147, 52), (52, 69, 147)]
    order = {str(name): i for i, name in enumerate(class_names)}
    width = max(1, round(max(picture.size) / 200))
    for box in boxes:
        colour = palette[order.get(str(box["class"]), len(order)) % len(palette)]
        x1, y1, x2, y2 = box["box"]
        draw.rectangle((x1, y1, x2, y2), outline=colour, width=width)
        label = f"{box['class']} {box['score']:.2f}"
        left, top, right, bottom = draw.textbbox((x1, y1), label)
        lift = bottom - top + 2
        draw.rectangle((x1, y1 - lift, x1 + right - left + 2, y1), fill=colour)
        draw.text((x1 + 1, y1 - lift), label, fill=(255, 255, 255))
    buffer = io.BytesIO()
    picture.save(buffer, format=kind)
    return buffer.getvalue()


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


def write_rows(output: str, rows: Iterable[dict[str, Any]], class_names: Sequence[str] = ()) -> tuple[int, list[str]]:
    """Stream ``rows`` (dicts with the same keys) into ``output`` by its suffix — CSV (lists and dicts as JSON
    text), Parquet, JSON lines or a JSON document (``write_json``) — under a temporary name, then renamed; returns
    the count and the columns (a failure while the rows are made leaves nothing at ``output``). ``class_names``: a
    detection document's categories."""
    fs, path = filesystem(output)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    temporary = f"{path}.partial"
    kind = suffix(output)
    count, columns = 0, []
    try:
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
                    writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
                    count += 1
            elif kind == "json":
                count, columns = write_json(handle, rows, class_names)
            else:
                for row in rows:
                    columns = columns or list(row)
                    handle.write(json.dumps(row) + "\n")
                    count += 1
    except BaseException:  # the rows failed (bad data, a model that cannot run them): no partial file is left
        if fs.exists(temporary):
            fs.rm(temporary)
        raise
    fs.mv(temporary, path)
    return count, columns


def write_json(handle: Any, rows: Iterable[dict[str, Any]], class_names: Sequence[str] = ()
               ) -> tuple[int, list[str]]:
    """Write ``rows`` to the text stream ``handle`` as one JSON document; returns the count and the columns.

    Detection rows (with ``boxes``) become COCO's shape: ``images`` (``id`` from 1 in input order, ``file_name``:
    the sample's id, ``width``, ``height``), ``categories`` (``class_names``, ``id`` from 1) and ``annotations``
    (``image_id``, ``category_id``, ``bbox`` ``[x, y, width, height]`` from the top-left corner, ``area``,
    ``score``, ``iscrowd`` 0). Annotations are spooled to a temporary file as images stream, so no row is held.
    Other rows become an array of objects.
    """
    rows = iter(rows)
    first = next(rows, None)
    if first is None or "boxes" not in first:
        handle.write("[")
        count = 0
        for row in _chain(first, rows):
            handle.write(("," if count else "") + "\n" + json.dumps(row))
            count += 1
        handle.write("\n]\n")
        return count, list(first or {})
    categories = {str(name): i + 1 for i, name in enumerate(class_names)}
    handle.write('{"images": [')
    count, annotation = 0, 0
    with tempfile.TemporaryFile("w+") as spool:
        for row in _chain(first, rows):
            count += 1
            image = {"id": count, "file_name": row.get("id", str(count)), "width": row.get("width"),
                     "height": row.get("height")}
            handle.write(("," if count > 1 else "") + "\n" + json.dumps(image))
            for box in row["boxes"]:
                name = str(box["class"])
                category = categories.setdefault(name, len(categories) + 1)
                x1, y1, x2, y2 = (float(v) for v in box["box"])
                annotation += 1
                spool.write(("," if annotation > 1 else "") + "\n" + json.dumps(
                    {"id": annotation, "image_id": count, "category_id": category,
                     "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                     "area": round((x2 - x1) * (y2 - y1), 2), "score": round(float(box["score"]), 5), "iscrowd": 0}))
        handle.write('\n], "categories": ' + json.dumps(
            [{"id": i, "name": name} for name, i in categories.items()]) + ', "annotations": [')
        spool.seek(0)
        for line in spool:
            handle.write(line)
    handle.write('\n]}\n')
    return count, list(first)


def _chain(first: dict[str, Any] | None, rest: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    if first is not None:
        yield first
    yield from rest


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
