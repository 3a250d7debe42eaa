""":func:`to_rknn`: an ONNX model to a ``.rknn`` for a Rockchip target, float or INT8 (rknn-toolkit2's own
quantizer, calibrated on real samples), run in rknn's simulator on the given inputs — from the training
environment, through the converter venv's worker."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_edge.rknn.venv import python
from twinkle_edge.targets import TARGETS

RKNN_TARGETS: dict[str, dict[str, Any]] = {name: {"float": info["float"], "int8": info["quantize"]}
                                           for name, info in TARGETS.items() if info["converter"] == "rknn"}
"""Rockchip platforms rknn-toolkit2 2.5.0 builds for, and which precisions each takes (measured)."""
MAX_OPSET = 19
"""The newest ONNX opset rknn-toolkit2 2.5.0 reads."""
WORKER = Path(__file__).with_name("worker.py")


class RKNNError(TwinkleError):
    """An RKNN conversion that failed or cannot be made (the step, the converter's reason, the fix)."""


def check_target(target: str, quantize: bool) -> None:
    """Refuse a platform rknn-toolkit2 does not build for, or a precision it does not take there.

    Raises:
        RKNNError: naming the platforms, or the precision to choose.
    """
    if target not in RKNN_TARGETS:
        raise RKNNError(f"unknown RKNN target {target!r}; rknn-toolkit2 2.5.0 builds for "
                        f"{', '.join(sorted(RKNN_TARGETS))}")
    kind = "int8" if quantize else "float"
    if not RKNN_TARGETS[target][kind]:
        other = "quantize=True (INT8)" if not quantize else "quantize=False (float)"
        raise RKNNError(f"{target} does not run {kind} models in rknn-toolkit2 2.5.0; use {other}")


def onnx_opset(path: str) -> int:
    """The default-domain opset of an ONNX file."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def to_rknn(onnx_path: str, output: str, target: str = "rk3588", quantize: bool = True,
            calibration: np.ndarray | None = None, inputs: np.ndarray | None = None,
            timeout: float = 1800) -> dict[str, Any]:
    """Convert ``onnx_path`` to ``output`` (``.rknn``) and run ``inputs`` in rknn's simulator.

    Args:
        onnx_path: the model (opset ≤ 19, a fixed batch of one).
        output: the ``.rknn`` to write.
        target: a platform of :data:`RKNN_TARGETS`.
        quantize: INT8 with rknn's quantizer (``calibration`` needed), else float.
        calibration: samples (N × input shape) to calibrate INT8 on, in the ONNX input's layout.
        inputs: samples to run in the simulator (default: the first calibration sample).

    Returns:
        ``rknn_bytes``, ``outputs`` (the simulator's, one row per input, flattened) and ``seconds`` per step.

    Raises:
        RKNNError: an unknown target or precision, an opset it refuses, or the failing step with its reason.
        ConverterMissingError: no converter venv (``twinkle edge setup`` makes it).
    """
    check_target(target, quantize)
    opset = onnx_opset(onnx_path)
    if opset > MAX_OPSET:
        raise RKNNError(f"{onnx_path} has opset {opset}; rknn-toolkit2 reads opsets up to {MAX_OPSET}: export with "
                        f"opset_version={MAX_OPSET} (or lower)")
    if quantize and (calibration is None or not len(calibration)):
        raise RKNNError("INT8 needs calibration samples (real inputs of the model)")
    interpreter = python()
    samples = inputs if inputs is not None else (calibration[:1] if calibration is not None else None)
    if samples is None:
        raise RKNNError("give inputs to run in the simulator (or calibration samples)")
    with tempfile.TemporaryDirectory(prefix="twinkle-rknn-") as work:
        dataset = []
        for index, sample in enumerate(calibration if quantize else []):
            path = os.path.join(work, f"calibration-{index}.npy")
            np.save(path, np.asarray(sample, dtype=np.float32)[None])
            dataset.append(path)
        np.save(os.path.join(work, "inputs.npy"), np.asarray(samples, dtype=np.float32))
        request = {"onnx": os.path.abspath(onnx_path), "target": target, "quantize": quantize, "dataset": dataset,
                   "inputs": os.path.join(work, "inputs.npy"), "output": os.path.abspath(output), "workdir": work}
        with open(os.path.join(work, "request.json"), "w", encoding="utf-8") as handle:
            json.dump(request, handle)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        command = [interpreter, str(WORKER), os.path.join(work, "request.json")]
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONNOUSERSITE": "1"})
        result_path = os.path.join(work, "result.json")
        if not os.path.exists(result_path):  # the converter died (a native abort)
            raise RKNNError(f"rknn-toolkit2 stopped without an answer (exit {done.returncode}) converting "
                            f"{onnx_path} for {target}: {(done.stderr or done.stdout)[-1500:]}")
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
        if not result["ok"]:
            raise RKNNError(f"rknn-toolkit2 failed at {result['step']} converting {onnx_path} for {target}: "
                            f"{result['message']}")
        result["outputs"] = np.load(result["outputs"])
    return result
