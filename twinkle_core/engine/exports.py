"""``Trainer.export``: choose the exporter, verify the artefact, describe it (its inference card, in its metadata
and in a JSON beside it) and record it with the run."""

from __future__ import annotations

import json
from typing import Any

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import PreparedData
from twinkle_core.data.spec import DataSpec
from twinkle_core.errors import TwinkleError
from twinkle_core.exporting.base import Exporter, ExportResult
from twinkle_core.exporting.verify import export_and_verify
from twinkle_core.lookup import get_component
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.store.runs import RunStore


def exporter_for(format: str) -> Exporter:
    """A new instance of the exporter registered for ``format``.

    Raises:
        UnknownComponentError: no exporter has that name; TwinkleError: the target is not an Exporter.
    """
    component = get_component("exporter", format)
    exporter_cls = component.load()
    if not (isinstance(exporter_cls, type) and issubclass(exporter_cls, Exporter)):
        raise TwinkleError(f"exporter '{component.qualified_name}' is not an Exporter subclass")
    return exporter_cls()


def export_run(
    store: RunStore,
    exporter: Exporter,
    model: Algorithm,
    prepared: PreparedData,
    run_uri: str | None,
    checkpoint: str | None,
    output: str | None,
    quantize: bool,
    options: dict[str, Any],
    card: dict[str, Any] | None = None,
) -> ExportResult:
    """Export ``model`` (with its data, run and checkpoint) with ``exporter``, its inference card ``card`` in its
    metadata and in ``<output>.json`` beside it (with the verification); record it with the run.

    ``output`` gets the format's suffix when its name lacks it (``out/yolo3`` → ``out/yolo3.onnx``, as
    ultralytics names its exports), and ``model[-int8]<suffix>`` inside it when it is a folder (a name ending in
    ``/`` or an existing folder); a folder format's output is used as given. The cards hold no path of this
    machine (``portable``); the JSON card is readable as the artefact is (``0o666`` less the umask)."""
    record = store.get(run_uri) if run_uri else None
    quantize = quantize or exporter.int8_only
    name = f"model{'-int8' if quantize else ''}{exporter.suffix}"
    if output is None:
        if record is None:
            raise TwinkleError("this model belongs to no run; pass output='path'")
        output = store.path(record.id, "exports", name)
    else:
        output = output_path(output, exporter, name)
    if card is not None:
        card["quantized"] = quantize
        if record is not None and checkpoint:
            card["checkpoint"] = _in_run(store, record, checkpoint)
        card = portable(card)
    result = export_and_verify(model, exporter, output, prepared.val, prepared.train, quantize=quantize,
                               options=options, collate_fn=prepared.collate_fn, card=card)
    result.details["checkpoint"] = checkpoint
    beside = portable({**result.to_dict(), "path": output.rstrip("/").rsplit("/", 1)[-1], "inference": card})
    if record is not None and checkpoint:
        beside["details"]["checkpoint"] = portable(_in_run(store, record, checkpoint))
    atomic_write_text(f"{output.rstrip('/')}.json", json.dumps(beside, indent=2, default=str) + "\n", mode=0o666)
    if record is not None:
        store.update(record.id, exports=[*record.exports, result.to_dict()])
        from twinkle_core.engine.reporting import report_export

        report_export(store, record.uri, output)  # to the run's trackers (report_to), if it has any
    return result


def output_path(output: str, exporter: Exporter, name: str) -> str:
    """Where an export asked for at ``output`` goes: ``output`` with ``exporter.suffix`` added when its name ends in
    none of the format's ``suffixes`` (``out/yolo3``, ``out/model.v2`` → ``.onnx`` added: ``twinkle predict`` knows
    an ONNX file by its suffix), or ``name`` inside it when it is a folder (ends in ``/`` or exists as one); a folder
    format's as given."""
    if exporter.folder or not exporter.suffix:
        return output
    from twinkle_core.uris import filesystem, join

    fs, path = filesystem(output)
    if output.endswith(("/", "\\")) or fs.isdir(path):
        return join(output.rstrip("/"), name)
    if output.lower().endswith(tuple(s.lower() for s in (*exporter.suffixes, exporter.suffix))):
        return output
    return output + exporter.suffix


def _in_run(store: RunStore, record: Any, checkpoint: str) -> str:
    """``checkpoint`` as a ``twinkle://`` URI inside its run when it lies in the run's folder, else as given."""
    folder = str(store.run_dir(record.id)).rstrip("/")
    if checkpoint.startswith(folder + "/"):
        return f"{record.uri.rstrip('/')}/{checkpoint[len(folder) + 1:]}"
    return checkpoint


def is_local_path(value: str) -> bool:
    """Whether ``value`` is a path of this machine: absolute (``/x``, ``~/x``, ``C:\\x``) or a ``file://`` URL."""
    return (value.startswith(("/", "~/", "file://")) or (len(value) > 2 and value[1] == ":" and value[2] in "/\\")
            ) and "\n" not in value


def portable(value: Any) -> Any:
    """``value`` (a card, any JSON-ready nesting) without this machine's paths: keys inference never needs (a
    YOLO run's ``data_yaml``) dropped, any other local path cut to its file name (a weights file, a checkpoint
    outside the store). Labels (``LABEL_KEYS``: class names, columns — ``/m/01g317`` is an OpenImages class, not a
    path), sizes, URIs of the store and of remote storage are kept as they are."""
    if isinstance(value, dict):
        return {k: v if k in LABEL_KEYS else portable(v) for k, v in value.items() if k not in MACHINE_KEYS}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, str) and is_local_path(value):
        return value.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return value


MACHINE_KEYS = frozenset({"data_yaml"})
"""Card keys that only describe the exporting machine (dropped from every card by ``portable``)."""
LABEL_KEYS = frozenset({"class_names", "names", "columns", "labels"})
"""Card keys whose values are data (labels, column names), never paths: ``portable`` keeps them as they are."""


def inference_card(model: Algorithm, spec: DataSpec, preprocessing: dict[str, Any], run_uri: str | None,
                   checkpoint: str | None) -> dict[str, Any]:
    """What inference needs to use an export without Twinkle's training code: the task and its kind, the
    classes, how raw data becomes the input (``DataProcessor.preprocessing``), what the output means and how to
    decode it (``Algorithm.export_decoding``: a detector's boxes and thresholds), the data spec, the algorithm's
    scalar hyperparameters, and where it came from. ``export_and_verify`` adds the graph's ``inputs``;
    ``export_run`` removes this machine's paths (``portable``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        core = version("twinkle-core")
    except PackageNotFoundError:  # a source tree that is not installed
        core = "0+unknown"
    kind = model.task_info.kind
    own = {name for name, hp in type(model).hyperparameters().items() if hp.owner == "algorithm"}
    hyperparameters = {k: v for k, v in dict(model.hparams).items()
                       if k in own and isinstance(v, (str, int, float, bool, type(None)))}
    output: dict[str, Any] = {"name": "output", "meaning": OUTPUT_MEANINGS.get(kind, "the model's raw output")}
    decoding = model.export_decoding()
    if decoding:
        output["decoding"] = decoding
    return {"card": CARD_VERSION, "twinkle_core": core, "algorithm": type(model).__name__,
            "hyperparameters": hyperparameters,
            "task": model.task, "task_kind": kind, "class_names": list(spec.class_names),
            "preprocessing": preprocessing,
            "output": output,
            "data_spec": spec.to_dict(), "run": run_uri, "checkpoint": checkpoint}


CARD_VERSION = 2
"""The inference card's layout version (``card`` in every card). 2: ``output["decoding"]``, the image readers'
full parameters (``twinkle predict model.onnx`` reads images and decodes boxes without a plugin), no local paths."""

OUTPUT_MEANINGS = {"classification": "logits, one per class in class_names order (softmax for probabilities)",
                   "regression": "the predicted value(s), in the target's units",
                   "detection": "per anchor a box (x_center, y_center, width, height in input pixels) and each "
                                "class's score; boxes need NMS (output['decoding'] says how)"}
"""What a task kind's exported output holds."""
