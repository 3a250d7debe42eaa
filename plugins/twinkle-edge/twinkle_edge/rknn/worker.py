"""The converter worker: ``<rknn venv>/bin/python worker.py`` — run inside rknn-toolkit2's own venv, so it
imports nothing of Twinkle's (only numpy and rknn).

It holds one model in rknn's simulator for as long as the training environment needs it (an exported
``.rknn`` cannot be simulated after ``load_rknn``: only the object that built it can run). Requests come as
JSON lines on stdin, answers go as JSON lines to the original stdout; everything rknn-toolkit2 prints is sent
to stderr instead, so its log never corrupts an answer. The requests:

- ``{"op": "build", "onnx", "target", "quantize", "dataset": [npy, ...], "output", "workdir"}``: config,
  load_onnx, build (INT8 with rknn's quantizer calibrated on the ``.npy`` samples, or float), export_rknn and
  init_runtime with no target (the simulator) → ``{"ok", "rknn_bytes", "seconds"}``;
- ``{"op": "run", "inputs": npy, "outputs": npz}``: every sample through the simulator, each output of the
  model stacked over the samples → ``{"ok", "outputs", "count"}``;
- ``{"op": "analyse", "inputs": npy, "output_dir"}``: rknn's per-layer ``accuracy_analysis`` of one sample;
- ``{"op": "board", "rknn", "target", "device", "inputs": npy, "outputs": npz}``: the exported ``.rknn`` on an
  attached board (adb id ``device``): the inputs run there, then ``eval_perf`` and ``eval_memory``;
- ``{"op": "close"}``.

rknn-toolkit2 reports failure in several ways — a return code of -1, an exception, ``None`` from
``inference`` — so each step is checked for all of them; a failure answers ``{"ok": false, "step", "message"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable


class StepError(Exception):
    """A step of the conversion failed."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step, self.message = step, message


def step(name: str, call: Callable[[], Any], seconds: dict[str, float]) -> Any:
    """Run one rknn call, timing it and turning each of rknn's ways of failing into ``StepError``."""
    start = time.perf_counter()
    try:
        value = call()
    except Exception as err:  # noqa: BLE001 — rknn raises ValueError/RuntimeError/… for bad input
        text = str(err).strip()
        if "Traceback (most recent call last)" in text:  # rknn wraps its own traceback: keep its last line
            text = text.splitlines()[-1]
        raise StepError(name, f"{type(err).__name__}: {text[-500:]}") from None
    seconds[name] = round(seconds.get(name, 0.0) + time.perf_counter() - start, 3)
    if (isinstance(value, int) and value != 0) or (value is None and name == "inference"):
        raise StepError(name, f"rknn-toolkit2's {name} returned {value!r} (its log says why)")
    return value


def infer_all(rknn: Any, request: dict, seconds: dict[str, float]) -> int:
    """Each sample of ``request["inputs"]`` (batch of one, NCHW) through ``rknn``'s runtime (simulator or board);
    every model output stacked over the samples into ``request["outputs"]`` (npz). Returns the sample count."""
    import numpy as np

    inputs = np.load(request["inputs"])
    stacks: list[list[Any]] = []
    for index in range(len(inputs)):
        outputs = step("inference", lambda: rknn.inference(inputs=[inputs[index:index + 1]], data_format="nchw"),
                       seconds)
        for position, value in enumerate(outputs):
            if position == len(stacks):
                stacks.append([])
            stacks[position].append(np.asarray(value, dtype=np.float32))
    np.savez(request["outputs"], *[np.concatenate(values) for values in stacks])
    return int(len(inputs))


class Simulator:
    """One model, built from ONNX and held in rknn's simulator."""

    def __init__(self) -> None:
        self.rknn: Any = None

    def build(self, request: dict) -> dict:
        """config → load_onnx → build → export_rknn → init_runtime (simulator)."""
        from rknn.api import RKNN

        self.release()
        seconds: dict[str, float] = {}
        self.rknn = rknn = RKNN(verbose=False)
        config = {"target_platform": request["target"]}
        if request["quantize"]:
            config.update(quantized_dtype="w8a8", quantized_algorithm="normal", quantized_method="channel")
        step("config", lambda: rknn.config(**config), seconds)
        step("load_onnx", lambda: rknn.load_onnx(model=request["onnx"]), seconds)
        dataset = None
        if request["quantize"]:
            dataset = os.path.join(request["workdir"], "dataset.txt")
            with open(dataset, "w", encoding="utf-8") as handle:
                handle.write("\n".join(request["dataset"]) + "\n")
        step("build", lambda: rknn.build(do_quantization=request["quantize"], dataset=dataset), seconds)
        step("export_rknn", lambda: rknn.export_rknn(request["output"]), seconds)
        step("init_runtime", lambda: rknn.init_runtime(), seconds)  # no target: rknn's simulator
        return {"ok": True, "rknn_bytes": os.path.getsize(request["output"]), "seconds": seconds}

    def run(self, request: dict) -> dict:
        """Each sample (batch of one, NCHW) through the simulator; every output stacked over the samples."""
        if self.rknn is None:
            raise StepError("inference", "no model is built yet")
        seconds: dict[str, float] = {}
        count = infer_all(self.rknn, request, seconds)
        return {"ok": True, "outputs": request["outputs"], "count": count, "seconds": seconds}

    def analyse(self, request: dict) -> dict:
        """rknn's per-layer accuracy analysis (float reference vs simulator) of one sample, written to a folder."""
        if self.rknn is None:
            raise StepError("accuracy_analysis", "no model is built yet")
        seconds: dict[str, float] = {}
        step("accuracy_analysis", lambda: self.rknn.accuracy_analysis(inputs=[request["inputs"]],
                                                                      output_dir=request["output_dir"]), seconds)
        return {"ok": True, "output_dir": request["output_dir"], "seconds": seconds}

    def board(self, request: dict) -> dict:
        """The exported ``.rknn`` on a board (``device``: its adb id): the inputs run there, then rknn's
        ``eval_perf`` and ``eval_memory`` (the board's own figures, as rknn reports them)."""
        from rknn.api import RKNN

        seconds: dict[str, float] = {}
        rknn = RKNN(verbose=False)
        try:
            step("load_rknn", lambda: rknn.load_rknn(request["rknn"]), seconds)
            step("init_runtime", lambda: rknn.init_runtime(target=request["target"], device_id=request["device"],
                                                           eval_mem=True), seconds)
            infer_all(rknn, request, seconds)
            perf = step("eval_perf", lambda: rknn.eval_perf(is_print=False), seconds)
            memory = step("eval_memory", lambda: rknn.eval_memory(is_print=False), seconds)
        finally:
            rknn.release()
        return {"ok": True, "outputs": request["outputs"], "perf": _plain(perf), "memory": _plain(memory),
                "seconds": seconds}

    def release(self) -> None:
        """Free the model."""
        if self.rknn is not None:
            self.rknn.release()
            self.rknn = None


def _plain(value: Any) -> Any:
    """rknn's result as JSON-ready values (numbers and strings; anything else as its text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def serve(requests: Any, answers: Any) -> int:
    """Answer each request line until ``close`` or the end of input."""
    simulator = Simulator()
    try:
        for line in requests:
            request = json.loads(line)
            op = request.get("op")
            if op == "close":
                break
            handler = {"build": simulator.build, "run": simulator.run, "analyse": simulator.analyse,
                       "board": simulator.board}.get(op)
            try:
                if handler is None:
                    raise StepError("request", f"unknown op {op!r}")
                answer = handler(request)
            except StepError as err:
                answer = {"ok": False, "step": err.step, "message": err.message}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        simulator.release()
    return 0


def main() -> int:
    """Entry point: answers go to the original stdout, everything printed (rknn's log) to stderr."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(sys.stdin, answers)


if __name__ == "__main__":
    sys.exit(main())
