"""Predictions from an exported ONNX file alone: ``twinkle predict model.onnx --data URI -o OUT``.

Every export carries its inference card (``Trainer.export``): the task, the graph's inputs, the class names, how
raw data becomes the input (``preprocessing``) and what the output means (``output``, with its ``decoding`` for a
detector). This module reads the card with onnxruntime, reads the data as the card says, runs the graph in batches
and writes one row per sample in input order (``twinkle_core.predictions``).

Core reads three kinds of data itself, without importing torch, Lightning or any plugin: ``table`` (the card's
columns from a CSV or Parquet file; needs pandas), ``image`` (an image classifier's images) and ``yolo-images`` (a
detector's letterboxed images; both need NumPy and Pillow: ``twinkle_core.inference.images``); a detector's
``boxes`` output is decoded in NumPy too (``twinkle_core.inference.detection``). Any other reader (K-lines,
speech, text) — or a card written before it carried what core needs — is the data processor the card names, from
its plugin, which must be installed: it reads the samples with the card's data spec
(``DataProcessor.read_samples``), as the run read its validation data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.predictions import CARD_KEY, check_output, classification_rows, regression_rows, write_rows
from twinkle_core.uris import require_exists, suffix


class NoInferenceCardError(TwinkleError):
    """An ONNX file that carries no Twinkle inference card (not exported by Twinkle, or before 0.3)."""


@dataclass
class ExportPredictions:
    """What ``predict_export`` wrote.

    Attributes:
        output: the file, one row per sample in input order.
        count: how many samples it holds.
        columns: its columns (``id`` first).
        model: the exported file that predicted.
        data_uri: the data predicted on.
        details: facts about the read (rows).
    """

    output: str
    count: int
    columns: list[str]
    model: str
    data_uri: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready values."""
        return asdict(self)


def read_card(model: str) -> dict[str, Any]:
    """The inference card of the ONNX file ``model`` (any URI).

    Raises:
        NoInferenceCardError: the file has none. TwinkleError: it is not an ONNX model onnxruntime can open.
    """
    session = _session(model)
    text = session.get_modelmeta().custom_metadata_map.get(CARD_KEY)
    if not text:
        raise NoInferenceCardError(f"'{model}' carries no Twinkle inference card (metadata '{CARD_KEY}'); export the "
                                   "run again with twinkle export (0.3 or later), or predict from the run itself")
    return json.loads(text)


BATCH_SIZES = {"table": 256, "image": 64, "yolo-images": 8}
"""Samples per forward pass when none is asked for, by reader (a detector's 640-pixel batch of 8 is already
~40 MB of input); other readers: 32."""


def predict_export(model: str, data: str, output: str, *, batch_size: int | None = None, overwrite: bool = False
                   ) -> ExportPredictions:
    """Predict every sample of ``data`` with the exported ONNX file ``model`` and write the rows to ``output``.

    Classifiers' and regressors' outputs are read as they are; a detector's by the card's ``decoding`` (in NumPy),
    else by the algorithm that trained the model (``Algorithm.export_prediction_rows``), from its plugin. Data of
    the readers core knows (``table``, ``image``, ``yolo-images``) is read without torch or a plugin.

    ``batch_size``: samples per forward pass (default: ``BATCH_SIZES`` by the card's reader).

    Raises:
        TwinkleError: the output exists (unless ``overwrite``) or has another suffix; the card's reader is not
            core's and its plugin is missing; the algorithm cannot read its raw outputs (speech, text
            generation: predict from the run); the data lacks the card's columns; an image cannot be read.
    """
    from twinkle_core.inference.detection import box_rows, decodes_itself
    from twinkle_core.inference.images import classifier_batches, detector_batches, reads_itself

    check_output(output, overwrite)
    session = _session(model)
    card = read_card(model)
    kind = card.get("task_kind")
    preprocessing = card.get("preprocessing") or {}
    reader = preprocessing.get("reader")
    decoding = (card.get("output") or {}).get("decoding")
    class_names = card.get("class_names") or []
    input_name = session.get_inputs()[0].name
    check_card(model, card, session)
    batch_size = batch_size or BATCH_SIZES.get(str(reader), 32)
    batches: Iterator[tuple[int, np.ndarray, Any]]
    native = reader == "table" or (reads_itself(preprocessing) and (
        kind in ("classification", "regression") or decodes_itself(decoding)))
    decoder = None if native or kind in ("classification", "regression") else _decoder(card, model)
    if native:
        _require("pandas" if reader == "table" else "PIL", reader)
    if reader == "table":
        names, tables, ids = _table(data, card, batch_size)
        details: dict[str, Any] = {"rows": len(ids), "columns": names}
        batches = ((start, array, None) for start, array in tables)
    elif native and reader == "image":
        images, ids, details = classifier_batches(data, preprocessing, batch_size)
        batches = ((start, array, None) for start, array in images)
    elif native:  # yolo-images: each batch with its images' letterboxes, to map boxes back
        batches, ids, details = detector_batches(data, preprocessing, batch_size)
    else:  # K-lines, speech, ... (or an older card): the data processor that trained the model reads them
        batches, ids, details = _through_processor(card, model, data, batch_size, decoder)

    def rows() -> Iterator[dict[str, Any]]:
        for start, inputs, batch in batches:
            try:
                outputs = session.run(None, {input_name: inputs})[0]
            except Exception as err:  # noqa: BLE001 — onnxruntime raises its own exception types
                raise TwinkleError(f"'{model}' cannot run samples {start + 1}–{start + len(inputs)} of '{data}' "
                                   f"(input of shape {list(inputs.shape)}): {str(err).splitlines()[0][:300]}"
                                   ) from None
            if decoder is not None:
                import torch

                predicted = decoder.export_prediction_rows(torch.from_numpy(outputs), batch)
            elif kind == "classification":
                predicted = classification_rows(outputs, class_names)
            elif kind == "regression":
                predicted = regression_rows(outputs)
            else:
                predicted = box_rows(outputs, batch, class_names, decoding)
            for offset, row in enumerate(predicted):
                yield {"id": ids[start + offset], **row}

    count, columns = write_rows(output, rows(), class_names)
    return ExportPredictions(output, count, columns, model, data, details)


def _require(module: str, reader: Any) -> None:
    """Refuse, naming the package to install, when ``module`` (what the card's ``reader`` needs) is missing.

    Raises:
        TwinkleError: ``module`` cannot be imported.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        package = {"PIL": "pillow"}.get(module, module)
        raise TwinkleError(f"this export reads its data as '{reader}', which needs {package}: pip install {package}")


def _decoder(card: dict[str, Any], model: str) -> Any:
    """The algorithm that reads this export's raw outputs (``Algorithm.export_prediction_rows``), built from the
    card's registered name, hyperparameters and data spec — no weights, no network.

    Raises:
        TwinkleError: the card names no registered algorithm (an export before 0.3), or its plugin is missing.
    """
    from twinkle_core.data.spec import DataSpec
    from twinkle_core.lookup import get_component

    name = card.get("algorithm_name")
    if not name:
        raise TwinkleError(f"'{model}' is a {card.get('task_kind')} model whose outputs need its algorithm's decoding, "
                           "and its card names no registered algorithm; export the run again (0.3 or later), or "
                           f"predict from its run ({card.get('run') or 'its checkpoint'})")
    from twinkle_core.algorithm import Algorithm

    cls = get_component("algorithm", name).load()
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise TwinkleError(f"algorithm '{name}' is not an Algorithm subclass")
    if cls.export_prediction_rows is Algorithm.export_prediction_rows:
        raise TwinkleError(f"'{model}' is a {card.get('task_kind')} model ({card.get('task')}); its raw outputs need "
                           f"the network around them (a vocoder, a sampling loop), which ONNX-only predict does not "
                           f"run — predict from its run: twinkle predict {card.get('run') or 'RUN'} --data ...")
    algorithm = cls.from_hyperparams(card.get("hyperparameters") or {}, task=card.get("task"))
    algorithm.data_spec = DataSpec.from_dict(card["data_spec"])
    return algorithm


def _through_processor(card: dict[str, Any], model: str, data: str, batch_size: int, decoder: Any = None
                       ) -> tuple[Iterator[tuple[int, np.ndarray, Any]], list[str], dict[str, Any]]:
    """The samples at ``data`` read by the data processor the card names (``DataProcessor.read_samples`` with the
    card's data spec), as ``(start, graph input, batch)`` triples — the input is a batch's first item, or what the
    ``decoder`` algorithm's ``export_inputs`` makes of the batch —, with their ids and the read's details.

    Raises:
        TwinkleError: the card names no processor, or its plugin is not installed (``UnknownComponentError``).
    """
    from twinkle_core.data.processor import DataProcessor
    from twinkle_core.data.spec import DataSpec
    from twinkle_core.lookup import get_component

    name = card.get("processor")
    reader = (card.get("preprocessing") or {}).get("reader") or "undescribed"
    if not name:
        raise TwinkleError(f"'{model}' reads its data as '{reader}' and names no data processor; predict from its "
                           f"run ({card.get('run') or 'its checkpoint'}) with the plugin that trained it")
    processor = get_component("data_processor", name).load()
    if not (isinstance(processor, type) and issubclass(processor, DataProcessor)):
        raise TwinkleError(f"data processor '{name}' is not a DataProcessor subclass")
    samples = processor.from_params({}, task=card.get("task")).read_samples(
        data, DataSpec.from_dict(card["data_spec"]), targets=False)
    from torch.utils.data import DataLoader

    def batches() -> Iterator[tuple[int, np.ndarray, Any]]:
        start = 0
        for batch in DataLoader(samples.dataset, batch_size=batch_size, shuffle=False,
                                collate_fn=samples.collate_fn):
            inputs = (decoder.export_inputs(batch) if decoder is not None else
                      batch[0] if isinstance(batch, (tuple, list)) else batch)
            yield start, inputs.numpy(), batch
            start += len(inputs)

    return batches(), samples.ids, dict(samples.details)


def check_card(model: str, card: dict[str, Any], session: Any) -> None:
    """The card's inputs (``card["inputs"]``: name, dtype, ``["batch", ...]`` shape; and for a table the columns it
    reads) agree with the graph's first input, before any data is read.

    Raises:
        TwinkleError: naming the model, what the card says and what the graph takes.
    """
    graph = session.get_inputs()[0]
    dims = [d if isinstance(d, int) else None for d in graph.shape]
    described = (card.get("inputs") or [None])[0]
    if described:
        shape = [None if isinstance(d, str) else int(d) for d in described.get("shape", [])]
        fixed = [(a, b) for a, b in zip(shape[1:], dims[1:]) if a is not None and b is not None]
        if described.get("name") != graph.name or len(shape) != len(dims) or any(a != b for a, b in fixed):
            raise TwinkleError(f"the inference card of '{model}' describes input '{described.get('name')}' of shape "
                               f"{described.get('shape')}, but the graph takes '{graph.name}' of shape "
                               f"{graph.shape}: the card does not belong to this graph; export the run again")
    columns = (card.get("preprocessing") or {}).get("columns")
    if (card.get("preprocessing") or {}).get("reader") == "table" and columns and len(dims) == 2 \
            and dims[1] is not None and dims[1] != len(columns):
        raise TwinkleError(f"the inference card of '{model}' reads {len(columns)} column(s), but the graph takes "
                           f"{dims[1]} feature(s) a row: the card does not belong to this graph; export the run again")


def _session(model: str) -> Any:
    """An onnxruntime session of the file at ``model`` (read through fsspec)."""
    import onnxruntime as ort

    fs, path = require_exists(model, "exported model")
    try:
        return ort.InferenceSession(fs.cat_file(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 — onnxruntime raises its own exception types
        raise TwinkleError(f"'{model}' is not an ONNX model onnxruntime can open ({type(err).__name__}: {err})"
                           ) from None


def _table(data: str, card: dict[str, Any], batch_size: int
           ) -> tuple[list[str], Iterator[tuple[int, np.ndarray]], list[str]]:
    """The card's columns of the table at ``data`` as float32 batches of ``batch_size`` rows, and the rows' ids."""
    import pandas as pd

    fs, path = require_exists(data)
    if fs.isdir(path):
        raise TwinkleError(f"'{data}' is a folder; this model reads one CSV or Parquet table: give the file's path")
    try:
        with fs.open(path, "rb") as handle:
            frame = pd.read_parquet(handle) if suffix(data) in ("parquet", "pq") else pd.read_csv(handle)
    except pd.errors.EmptyDataError:
        raise TwinkleError(f"'{data}' is empty; it needs a header row with the model's columns and data rows"
                           ) from None
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise TwinkleError(f"cannot read '{data}' as a table: {err}") from None
    if frame.empty:
        raise TwinkleError(f"'{data}' has a header but no rows; give the rows to predict")
    frame.columns = [str(c) for c in frame.columns]
    names = [str(c) for c in card["preprocessing"].get("columns", [])]
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise TwinkleError(f"'{data}' lacks {len(missing)} column(s) the model reads: {', '.join(missing[:8])}"
                           f"{' ...' if len(missing) > 8 else ''}; add them")
    values = frame[names].apply(pd.to_numeric, errors="coerce")
    if values.isna().to_numpy().any():
        column = values.isna().any().idxmax()
        row = int(np.flatnonzero(values[column].isna().to_numpy())[0])
        raise TwinkleError(f"column '{column}' of '{data}' holds {frame[column].iloc[row]!r} in data row {row + 1}, "
                           "not a number; fix or drop the row")
    array = values.to_numpy(dtype=np.float32)
    ids = [str(i + 1) for i in range(len(frame))]
    return names, ((start, array[start:start + batch_size]) for start in range(0, len(array), batch_size)), ids


__all__ = ["BATCH_SIZES", "ExportPredictions", "NoInferenceCardError", "check_card", "predict_export", "read_card"]
