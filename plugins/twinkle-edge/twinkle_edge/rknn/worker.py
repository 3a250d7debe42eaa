"""The converter worker: ``<rknn venv>/bin/python worker.py REQUEST.json`` — run inside rknn-toolkit2's own
venv, so it imports nothing of Twinkle's (only numpy and rknn).

The request names the ONNX model, the target platform, whether to quantize (with calibration ``.npy`` files in
the ONNX input's layout, NCHW with a batch of one), the ``.rknn`` to write and inputs to run in rknn's
simulator. rknn-toolkit2 reports failure in several ways — a return code of -1, an exception, ``None`` from
``inference`` — so each step is checked for all of them. The answer is ``RESULT.json`` beside the request:
``{"ok": true, "rknn_bytes", "outputs", "seconds"}`` or ``{"ok": false, "step", "message"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _answer(path: str, result: dict) -> int:
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)
    return 0 if result.get("ok") else 1


def convert(request: dict) -> dict:
    """Convert, export and simulate as ``request`` says; returns the answer."""
    import numpy as np
    from rknn.api import RKNN

    seconds: dict[str, float] = {}
    rknn = RKNN(verbose=False)

    def step(name: str, call):  # noqa: ANN001, ANN202
        start = time.perf_counter()
        try:
            value = call()
        except Exception as err:  # noqa: BLE001 — rknn raises ValueError/RuntimeError/… for bad input
            raise StepError(name, f"{type(err).__name__}: {str(err).strip()[-500:]}") from None
        seconds[name] = round(time.perf_counter() - start, 3)
        if (isinstance(value, int) and value != 0) or (value is None and name == "inference"):
            raise StepError(name, f"rknn-toolkit2's {name} returned {value!r} (its log above says why)")
        return value

    try:
        config = {"target_platform": request["target"]}
        if request["quantize"]:
            config.update(quantized_dtype="w8a8", quantized_algorithm="normal", quantized_method="channel")
        step("config", lambda: rknn.config(**config))
        step("load_onnx", lambda: rknn.load_onnx(model=request["onnx"]))
        dataset = None
        if request["quantize"]:
            dataset = os.path.join(request["workdir"], "dataset.txt")
            with open(dataset, "w", encoding="utf-8") as handle:
                handle.write("\n".join(request["dataset"]) + "\n")
        step("build", lambda: rknn.build(do_quantization=request["quantize"], dataset=dataset))
        step("export_rknn", lambda: rknn.export_rknn(request["output"]))
        step("init_runtime", lambda: rknn.init_runtime())  # no target: rknn's simulator
        inputs = np.load(request["inputs"])
        outputs = []
        for index in range(len(inputs)):
            result = step("inference", lambda: rknn.inference(inputs=[inputs[index:index + 1]], data_format="nchw"))
            outputs.append(np.asarray(result[0], dtype=np.float32).reshape(1, -1))
        out_path = os.path.join(request["workdir"], "outputs.npy")
        np.save(out_path, np.concatenate(outputs))
        return {"ok": True, "rknn_bytes": os.path.getsize(request["output"]), "outputs": out_path, "seconds": seconds}
    except StepError as err:
        return {"ok": False, "step": err.step, "message": err.message, "seconds": seconds}
    finally:
        rknn.release()


class StepError(Exception):
    """A step of the conversion failed."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step, self.message = step, message


def main(argv: list[str]) -> int:
    """Entry point: ``REQUEST.json``; writes ``RESULT.json`` beside it."""
    with open(argv[0], encoding="utf-8") as handle:
        request = json.load(handle)
    return _answer(os.path.join(os.path.dirname(argv[0]), "result.json"), convert(request))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
