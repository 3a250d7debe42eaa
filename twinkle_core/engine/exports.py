"""``Trainer.export``: choose the exporter, verify the artefact and record it with the run."""

from __future__ import annotations

from typing import Any

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import PreparedData
from twinkle_core.errors import TwinkleError
from twinkle_core.exporting.base import Exporter, ExportResult
from twinkle_core.exporting.verify import export_and_verify
from twinkle_core.lookup import get_component
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
) -> ExportResult:
    """Export ``model`` (with its data, run and checkpoint) with ``exporter``; record it with the run."""
    record = store.get(run_uri) if run_uri else None
    quantize = quantize or exporter.int8_only
    if output is None:
        if record is None:
            raise TwinkleError("this model belongs to no run; pass output='path'")
        name = f"model{'-int8' if quantize else ''}{exporter.suffix}"
        output = store.path(record.id, "exports", name)
    result = export_and_verify(model, exporter, output, prepared.val, prepared.train, quantize=quantize,
                               options=options, collate_fn=prepared.collate_fn)
    result.details["checkpoint"] = checkpoint
    if record is not None:
        store.update(record.id, exports=[*record.exports, result.to_dict()])
        stem = output.rstrip("/").rsplit("/", 1)[-1]
        store.write_json(record.id, f"exports/{stem}.json", result.to_dict())
    return result
