"""``RKNNSession`` and ``to_rknn``: an ONNX model to a ``.rknn`` for a Rockchip target, float or INT8
(rknn-toolkit2's own quantizer, calibrated on real samples), then held in rknn's simulator to run inputs — from
the training environment, through the converter venv's worker (JSON lines over a pipe)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import warnings
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


def check_opset(opset_version: int, source: str = "opset_version") -> None:
    """Refuse an ONNX opset rknn-toolkit2 2.5.0 cannot read.

    Raises:
        RKNNError: naming the opset and the newest one it reads.
    """
    if int(opset_version) > MAX_OPSET:
        raise RKNNError(f"{source}={opset_version}: rknn-toolkit2 reads opsets up to {MAX_OPSET}; export with "
                        f"opset_version={MAX_OPSET} (or lower)")


def onnx_opset(path: str) -> int:
    """The default-domain opset of an ONNX file."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def check_request(onnx_path: str, target: str, quantize: bool, calibration: np.ndarray | None) -> None:
    """Refuse, before the converter starts, what it would refuse: the target, the precision, the opset, INT8
    without calibration samples.

    Raises:
        RKNNError: naming the value and the fix.
    """
    check_target(target, quantize)
    check_opset(onnx_opset(onnx_path), f"{onnx_path} has opset")
    if quantize and (calibration is None or not len(calibration)):
        raise RKNNError("INT8 needs calibration samples (real inputs of the model)")


class RKNNSession:
    """rknn-toolkit2's worker, started in its converter venv, holding one built model in its simulator.

    Use it as a context manager (or call ``close``): ``build`` converts, ``run`` runs samples in
    the simulator, ``analyse`` writes rknn's per-layer accuracy analysis. The worker's log is kept in the
    session's folder and quoted in errors.

    Raises:
        ConverterMissingError: no converter venv (``twinkle edge setup`` makes it).
    """

    def __init__(self, timeout: float = 1800) -> None:
        """Start the worker (nothing is converted yet)."""
        interpreter = python()
        self.timeout = timeout
        self.workdir = tempfile.mkdtemp(prefix="twinkle-rknn-")
        self._log = open(os.path.join(self.workdir, "rknn.log"), "w+", encoding="utf-8")
        self._process = subprocess.Popen([interpreter, str(WORKER)], cwd=self.workdir, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log, text=True,
                                         env={**os.environ, "PYTHONNOUSERSITE": "1"})
        self._runs = 0
        self.built: str | None = None

    def __enter__(self) -> RKNNSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log_tail(self) -> str:
        self._log.flush()
        with open(self._log.name, encoding="utf-8", errors="replace") as handle:
            return handle.read()[-1500:]

    def _ask(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        process = self._process
        if process.poll() is not None or process.stdin is None or process.stdout is None:
            raise RKNNError(f"rknn-toolkit2's worker is not running ({what}): {self._log_tail()}")
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], self.timeout)
        line = process.stdout.readline() if ready else ""
        if not line:  # a native abort, or no answer in time
            process.kill()
            reason = f"exit {process.wait()}" if ready else f"no answer in {self.timeout:g} s"
            raise RKNNError(f"rknn-toolkit2 stopped ({reason}) {what}: {self._log_tail()}")
        answer = json.loads(line)
        if not answer["ok"]:
            said = self._log_errors()
            raise RKNNError(f"rknn-toolkit2 failed at {answer['step']} {what}: {answer['message']}"
                            + (f"; its log says: {said}" if said else ""))
        return answer

    def _log_errors(self, count: int = 3) -> str:
        """The last error lines of rknn's log (its ``E ...`` lines, colour codes removed)."""
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in self._log_tail().splitlines()]
        noise = ("Unkown op target", "Traceback (most recent call last)", "rknn-toolkit2 version")
        errors = [line for line in lines if line.startswith("E ") and not any(n in line for n in noise)]
        return " | ".join(errors[-count:])

    def build(self, onnx_path: str, output: str, target: str = "rk3588", quantize: bool = True,
              calibration: np.ndarray | None = None) -> dict[str, Any]:
        """Convert ``onnx_path`` (opset ≤ 19, a fixed batch of one) to ``output`` and load it in the simulator.

        Args:
            target: a platform of ``RKNN_TARGETS``.
            quantize: INT8 with rknn's quantizer (``calibration`` needed: N × the ONNX input's shape), else float.

        Returns:
            ``rknn_bytes`` and ``seconds`` per step.

        Raises:
            RKNNError: an unknown target or precision, an opset it refuses, or the failing step with its reason.
        """
        check_request(onnx_path, target, quantize, calibration)
        folder = tempfile.mkdtemp(prefix="calibration-", dir=self.workdir)
        dataset = []
        for index, sample in enumerate(calibration if quantize and calibration is not None else []):
            path = os.path.join(folder, f"{index}.npy")
            np.save(path, np.asarray(sample, dtype=np.float32)[None])
            dataset.append(path)
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        answer = self._ask({"op": "build", "onnx": os.path.abspath(onnx_path), "target": target,
                            "quantize": quantize, "dataset": dataset, "output": os.path.abspath(output),
                            "workdir": folder}, f"converting {onnx_path} for {target}")
        shutil.rmtree(folder, ignore_errors=True)
        self.built = os.path.abspath(output)
        return answer

    def build_module(self, module: Any, example: Any, output: str, target: str = "rk3588", quantize: bool = True,
                     calibration: np.ndarray | None = None, opset_version: int = 17) -> dict[str, Any]:
        """Export the PyTorch ``module`` to ONNX with the fixed shapes of ``example`` (rknn needs them), then
        ``build`` it. The ONNX file stays in the session's folder (``onnx`` in the answer)."""
        import torch

        check_opset(opset_version)
        check_target(target, quantize)
        onnx_path = os.path.join(self.workdir, "model.onnx")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
            torch.onnx.export(module.eval(), (example,), onnx_path, dynamo=False, opset_version=int(opset_version),
                              input_names=["input"])
        return {**self.build(onnx_path, output, target, quantize, calibration), "onnx": onnx_path}

    def _infer(self, request: dict[str, Any], inputs: np.ndarray, what: str) -> dict[str, Any]:
        """Send ``inputs`` with ``request`` (``run`` or ``board``); the answer with ``outputs``: each model output
        stacked over the samples (float32, the ONNX layout). The exchanged files are removed."""
        self._runs += 1
        feed = os.path.join(self.workdir, f"inputs-{self._runs}.npy")
        result = os.path.join(self.workdir, f"outputs-{self._runs}.npz")
        np.save(feed, np.asarray(inputs, dtype=np.float32))
        try:
            answer = self._ask({**request, "inputs": feed, "outputs": result}, what)
            with np.load(result) as stored:
                answer["outputs"] = [stored[f"arr_{i}"] for i in range(len(stored.files))]
            return answer
        finally:
            for path in (feed, result):
                if os.path.exists(path):
                    os.unlink(path)

    def run(self, inputs: np.ndarray) -> list[np.ndarray]:
        """Every sample of ``inputs`` (N × the ONNX input's shape) through the simulator; each model output,
        stacked over the samples (float32, the ONNX layout)."""
        return self._infer({"op": "run"}, inputs, f"running {self.built} in the simulator")["outputs"]

    def analyse(self, sample: np.ndarray, output_dir: str) -> str:
        """rknn's per-layer accuracy analysis of one sample (float reference vs the built model), written under
        ``output_dir`` (``error_analysis.txt`` and per-layer tensors); returns that folder."""
        feed = os.path.join(self.workdir, "analyse.npy")
        np.save(feed, np.asarray(sample, dtype=np.float32)[None])
        os.makedirs(output_dir, exist_ok=True)
        self._ask({"op": "analyse", "inputs": feed, "output_dir": os.path.abspath(output_dir)},
                  f"analysing {self.built}")
        return output_dir

    def board(self, rknn_path: str, target: str, device: str, inputs: np.ndarray) -> dict[str, Any]:
        """Run the exported ``rknn_path`` on an attached board (``device``: its adb id, as ``adb devices`` lists
        it): ``outputs`` for ``inputs`` (each model output stacked), and rknn's ``perf`` and ``memory`` reports.

        Raises:
            RKNNError: no such board (rknn's ``init_runtime`` names why), or a failing step.
        """
        return self._infer({"op": "board", "rknn": os.path.abspath(rknn_path), "target": target, "device": device},
                           inputs, f"running {rknn_path} on board {device!r} ({target})")

    def close(self) -> None:
        """Stop the worker and remove its folder."""
        process = self._process
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps({"op": "close"}) + "\n")
                process.stdin.close()
                process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def to_rknn(onnx_path: str, output: str, target: str = "rk3588", quantize: bool = True,
            calibration: np.ndarray | None = None, inputs: np.ndarray | None = None,
            timeout: float = 1800) -> dict[str, Any]:
    """Convert ``onnx_path`` to ``output`` (``.rknn``) and run ``inputs`` in rknn's simulator, in one go.

    Args: as ``RKNNSession.build``; ``inputs``: samples to run (default: the first calibration sample).

    Returns:
        ``rknn_bytes``, ``seconds`` per step, ``outputs`` (the first model output, one flattened row per input)
        and ``all_outputs`` (every output, stacked over the inputs).

    Raises:
        RKNNError: a bad target, precision or opset, or the failing step; ConverterMissingError: no venv.
    """
    check_request(onnx_path, target, quantize, calibration)
    samples = inputs if inputs is not None else (calibration[:1] if calibration is not None else None)
    if samples is None:
        raise RKNNError("give inputs to run in the simulator (or calibration samples)")
    with RKNNSession(timeout) as session:
        result = session.build(onnx_path, output, target, quantize, calibration)
        outputs = session.run(samples)
    return {**result, "outputs": outputs[0].reshape(len(samples), -1), "all_outputs": outputs}
