"""The ONNX exporter: one self-contained ``.onnx`` file, optionally INT8 (onnxruntime static QDQ)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from twinkle_core.exporting.base import ExportError, Exporter, input_values
from twinkle_core.predictions import CARD_KEY

DEFAULT_OPSET = 17
LEGACY_OPSETS = range(9, 21)
"""Opsets the TorchScript-based exporter writes exactly as asked (the dynamo exporter rewrites 11–17 to 18)."""


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(uint8)": np.uint8}


def _as_input(batch: np.ndarray, dtype: Any = None) -> np.ndarray:
    """A contiguous input array of the graph's type (integer ids stay integers; float64 becomes float32)."""
    if dtype is None:
        dtype = np.float32 if np.issubdtype(np.asarray(batch).dtype, np.floating) else None
    return np.ascontiguousarray(batch, dtype=dtype)


class _Calibration:
    """An onnxruntime ``CalibrationDataReader`` over input batches."""

    def __init__(self, batches: Iterable[np.ndarray], input_name: str) -> None:
        self._iter = iter([{input_name: _as_input(b)} for b in batches])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)


class ONNXExporter(Exporter):
    """Exports with ``torch.onnx.export`` (the TorchScript-based exporter) at the requested opset, batch axis
    dynamic. A model with several inputs (a dict example) becomes a graph with those named inputs, every axis
    of every input and output dynamic (sequence models take any length).

    ``quantize=True`` adds onnxruntime *static* INT8 quantization in QDQ format, calibrated on the run's own
    training data (dynamic quantization makes convolutional nets slower on CPU).
    """

    format = "onnx"
    suffix = ".onnx"
    supports_quantize = True

    def export(
        self,
        model: nn.Module,
        example: Any,
        path: str,
        *,
        quantize: bool = False,
        calibration: Iterable[np.ndarray] | None = None,
        opset_version: int | None = None,
        per_channel: bool = True,
        **options: Any,
    ) -> dict[str, Any]:
        """Write the model (and its INT8 version when ``quantize``) to ``path``; returns the facts."""
        if options:
            raise ExportError(
                f"unknown ONNX export option(s) {', '.join(sorted(options))}; valid: opset_version, per_channel"
            )
        opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
        if opset not in LEGACY_OPSETS:
            raise ExportError(
                f"opset_version={opset} cannot be written exactly: Twinkle exports opsets "
                f"{LEGACY_OPSETS.start}–{LEGACY_OPSETS.stop - 1} (torch's exporter rewrites others); pick one of those"
            )
        target = path if not quantize else path + ".fp32.tmp"
        try:
            self._export_fp32(model, example, target, opset)
            facts: dict[str, Any] = {"opset": self._written_opset(target),
                                     "input": list(example) if isinstance(example, dict) else "input",
                                     "output": "output"}
            if facts["opset"] != opset:
                raise ExportError(f"the ONNX file has opset {facts['opset']}, not the requested {opset}")
            if quantize:
                if calibration is None:
                    raise ExportError("quantize=True needs calibration data")
                facts.update(self._quantize(target, path, calibration, per_channel and opset >= 13))
        finally:
            if quantize and os.path.exists(target):
                os.unlink(target)
        return facts

    @staticmethod
    def _export_fp32(model: nn.Module, example: Any, path: str, opset: int) -> None:
        if isinstance(example, dict):
            names = list(example)
            with torch.no_grad():
                outputs = model(*input_values(example))
            outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            output_names = ["output", *(f"output_{i}" for i in range(1, len(outputs)))]
            axes = {name: {axis: f"{name}_{axis}" for axis in range(tensor.dim())}
                    for name, tensor in [*example.items(), *zip(output_names, outputs)]}
        else:
            names, output_names = ["input"], ["output"]
            axes = {"input": {0: "batch"}, "output": {0: "batch"}}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice and tracer warnings
            torch.onnx.export(
                model,
                input_values(example),
                path,
                dynamo=False,
                opset_version=opset,
                input_names=names,
                output_names=output_names,
                dynamic_axes=axes,
            )

    def describe(self, path: str, card: dict[str, Any]) -> bool:
        """Store the card as JSON in the model's ``metadata_props`` under ``twinkle`` (onnxruntime reads it back
        with ``InferenceSession(path).get_modelmeta().custom_metadata_map``)."""
        import json

        import onnx

        model = onnx.load(path)
        kept = [p for p in model.metadata_props if p.key != CARD_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        entry = model.metadata_props.add()
        entry.key, entry.value = CARD_KEY, json.dumps(card, sort_keys=True)
        onnx.save(model, path)
        return True

    @staticmethod
    def _written_opset(path: str) -> int:
        import onnx

        model = onnx.load(path, load_external_data=False)
        return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))

    @staticmethod
    def _quantize(fp32: str, path: str, calibration: Iterable[np.ndarray], per_channel: bool) -> dict[str, Any]:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        prepared = fp32 + ".pre.onnx"
        batches = list(calibration)
        try:
            quant_pre_process(fp32, prepared, skip_symbolic_shape=True)
            quantize_static(
                prepared,
                path,
                _Calibration(batches, "input"),
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
            )
        finally:
            if os.path.exists(prepared):
                os.unlink(prepared)
        return {
            "quantization": "static QDQ int8",
            "per_channel": per_channel,
            "calibration_samples": int(sum(len(b) for b in batches)),
        }

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray]:
        """An onnxruntime CPU session on ``path``."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        types = {graph_input.name: _ORT_TYPES.get(graph_input.type) for graph_input in session.get_inputs()}
        first = next(iter(types))

        def run(batch: Any) -> np.ndarray:
            feed = batch if isinstance(batch, dict) else {first: batch}
            return session.run(None, {name: _as_input(feed[name], types[name]) for name in types})[0]

        return run
