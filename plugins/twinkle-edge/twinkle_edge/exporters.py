"""twinkle-edge's exporters: ``rknn`` (a ``.rknn`` for a Rockchip NPU, verified in rknn-toolkit2's simulator)
and ``onnx-int8`` (ONNX with onnxruntime's static QDQ INT8, per channel, calibrated on the run's own data).

``trainer.export(format="rknn", target="rk3588", quantize=True)`` exports the model to ONNX at a fixed batch of
one (rknn's converter needs fixed shapes, opset ≤ 19), converts it in the converter venv with rknn's own INT8
quantizer (or float), keeps the built model in the simulator and runs the validation samples through it: the
result records the cosine similarity and metric of the simulated NPU model against the PyTorch model.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

import numpy as np
from torch import nn

from twinkle_core.exporting import ExportError, Exporter, ONNXExporter
from twinkle_edge.targets import TARGETS

RKNN_PLATFORMS = sorted(name for name, info in TARGETS.items() if info["converter"] == "rknn")
"""The Rockchip platforms the ``rknn`` exporter converts for."""
RKNN_DEFAULT_OPSET = 17
"""The opset the ``rknn`` exporter writes unless ``opset_version=`` says otherwise (at most 19)."""


class ONNXInt8Exporter(ONNXExporter):
    """ONNX, always INT8: onnxruntime static QDQ (per channel), calibrated on the run's training samples."""

    format = "onnx-int8"
    int8_only = True


class RKNNExporter(Exporter):
    """A ``.rknn`` for a Rockchip NPU (``target=``, default ``rk3588``), float or INT8 (rknn's quantizer).

    Verification runs the validation samples in rknn-toolkit2's simulator — the model the converter built, held
    in its worker until ``close`` (an exported ``.rknn`` itself runs only on a board). Float models run in
    fp16 on the NPU, hence the tolerance of ``1e-2``. An algorithm with a ``quantizable_export()`` (YOLO: raw
    per-scale box and class maps) is converted in that form and its outputs decoded on the CPU.
    """

    format = "rknn"
    suffix = ".rknn"
    supports_quantize = True
    float_tolerance = 1e-2
    verify_samples = 256
    decodes_on_cpu = True

    def __init__(self) -> None:
        """Nothing runs until ``export``."""
        self._session: Any = None
        self._built: str | None = None

    def export(self, model: nn.Module, example: Any, path: str, *, quantize: bool = False,
               calibration: Iterable[np.ndarray] | None = None, target: str = "rk3588",
               opset_version: int = RKNN_DEFAULT_OPSET, **options: Any) -> dict[str, Any]:
        """Write the ``.rknn`` for ``target`` to ``path`` and hold the built model in the simulator.

        Raises:
            ExportError: an unknown option; RKNNError: an unknown target, a precision it does not take, an opset
                above 19, or the converter's failing step; ConverterMissingError: no converter venv.
        """
        from twinkle_edge.rknn.convert import RKNNSession, check_opset, check_target

        if options:
            raise ExportError(f"unknown RKNN export option(s) {', '.join(sorted(options))}; valid: target, "
                              "opset_version")
        check_target(target, quantize)
        check_opset(opset_version)
        batches = list(calibration or []) if quantize else []
        samples = np.concatenate([np.asarray(b, dtype=np.float32) for b in batches]) if batches else None
        self.close()
        self._session = RKNNSession()
        answer = self._session.build_module(model, example, path, target, quantize, samples, opset_version)
        self._built = os.path.abspath(path)
        facts: dict[str, Any] = {"target": target, "opset": int(opset_version), "input": "input",
                                 "runtime": "rknn-toolkit2 2.5.0 simulator", "seconds": answer["seconds"],
                                 "board": "not measured (no board attached)"}
        if quantize:
            facts.update(quantization="rknn w8a8 (normal, per channel)", calibration_samples=int(len(samples)))
        else:
            facts["precision"] = "float16 on the NPU"
        return facts

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray | list[np.ndarray]]:
        """The simulator holding the model ``export`` built (each sample run as a batch of one): its output,
        or the list of them for a model with several (a detector's raw maps).

        Raises:
            RKNNError: ``path`` is not the model just built (a ``.rknn`` file runs only on a board).
        """
        from twinkle_edge.rknn.convert import RKNNError

        if self._session is None or os.path.abspath(path) != self._built:
            raise RKNNError(f"{path}: a .rknn file runs only on a Rockchip board; rknn-toolkit2's simulator runs "
                            "only the model it has just built (export it again to verify it)")
        session = self._session

        def run(batch: np.ndarray) -> np.ndarray | list[np.ndarray]:
            outputs = session.run(batch)
            return outputs[0] if len(outputs) == 1 else outputs

        return run

    def close(self) -> None:
        """Stop the converter worker."""
        if self._session is not None:
            self._session.close()
            self._session = None

