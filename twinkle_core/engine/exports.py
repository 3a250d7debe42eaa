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
    metadata and in ``<output>.json`` beside it (with the verification); record it with the run."""
    record = store.get(run_uri) if run_uri else None
    quantize = quantize or exporter.int8_only
    if output is None:
        if record is None:
            raise TwinkleError("this model belongs to no run; pass output='path'")
        name = f"model{'-int8' if quantize else ''}{exporter.suffix}"
        output = store.path(record.id, "exports", name)
    if card is not None:
        card["quantized"] = quantize
    result = export_and_verify(model, exporter, output, prepared.val, prepared.train, quantize=quantize,
                               options=options, collate_fn=prepared.collate_fn, card=card)
    result.details["checkpoint"] = checkpoint
    atomic_write_text(f"{output.rstrip('/')}.json",
                      json.dumps({**result.to_dict(), "inference": card}, indent=2, default=str) + "\n")
    if record is not None:
        store.update(record.id, exports=[*record.exports, result.to_dict()])
    return result


def inference_card(model: Algorithm, spec: DataSpec, preprocessing: dict[str, Any], run_uri: str | None,
                   checkpoint: str | None) -> dict[str, Any]:
    """What inference needs to use an export without Twinkle's training code: the task and its kind, the
    classes, how raw data becomes the input (``DataProcessor.preprocessing``), what the output means, the data
    spec, the algorithm's scalar hyperparameters (a detector's NMS thresholds), and where it came from.
    ``export_and_verify`` adds the graph's ``inputs``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        core = version("twinkle-core")
    except PackageNotFoundError:  # a source tree that is not installed
        core = "0+unknown"
    kind = model.task_info.kind
    own = {name for name, hp in type(model).hyperparameters().items() if hp.owner == "algorithm"}
    hyperparameters = {k: v for k, v in dict(model.hparams).items()
                       if k in own and isinstance(v, (str, int, float, bool, type(None)))}
    return {"card": CARD_VERSION, "twinkle_core": core, "algorithm": type(model).__name__,
            "hyperparameters": hyperparameters,
            "task": model.task, "task_kind": kind, "class_names": list(spec.class_names),
            "preprocessing": preprocessing,
            "output": {"name": "output", "meaning": OUTPUT_MEANINGS.get(kind, "the model's raw output")},
            "data_spec": spec.to_dict(), "run": run_uri, "checkpoint": checkpoint}


CARD_VERSION = 1
"""The inference card's layout version (``card`` in every card)."""

OUTPUT_MEANINGS = {"classification": "logits, one per class in class_names order (softmax for probabilities)",
                   "regression": "the predicted value(s), in the target's units",
                   "detection": "per anchor a box (x_center, y_center, width, height in input pixels) and each "
                                "class's score; boxes need NMS (the algorithm's export_prediction_rows)"}
"""What a task kind's exported output holds."""
