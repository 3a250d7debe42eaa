"""Both edge reports the tests check, with the time each stage of the journey takes on this machine:

* ``resnet18_digits``: ResNet-18 (32×32) trained 6 epochs on scikit-learn's digits, published, then
  ``EdgeOptimizer(model=..., target="rk3588", pruning_ratio=0.3)`` and the same for ``target="onnx-int8"``;
* ``yolov8n_shapes``: YOLOv8n trained 20 epochs at 128 px on 240 generated shapes images, published as
  ``yolov8n``, then the article's line as written (``target="rk3588"``, the default 5 fine-tuning epochs).

For every stage: parameters, MACs, file size, onnxruntime CPU latency (batch 1, one thread, median of 30),
the task metric and the similarity to the original model; the ratios to the original side by side. The
``.rknn`` stage's latency needs a board and is recorded as not measured.

Writes ``bench/results/edge.json``.

    python bench/edge.py
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _report(model: str, target: str) -> dict[str, Any]:
    from twinkle_edge import EdgeOptimizer

    start = time.perf_counter()
    report = EdgeOptimizer(model=model, target=target, pruning_ratio=0.3).optimize()
    seconds = round(time.perf_counter() - start, 1)
    print(report, flush=True)
    first = report.stages[0]
    ratios = {s.name: {"parameters": round(s.parameters / first.parameters, 3),
                       "macs": round(s.macs / first.macs, 3),
                       "file": round(s.file_bytes / first.file_bytes, 3),
                       "latency": round(s.latency_ms / first.latency_ms, 3) if s.latency_ms else None,
                       "metric_delta": round(s.metric_value - first.metric_value, 4)
                       if s.metric_value is not None and first.metric_value is not None else None}
              for s in report.stages}
    return {"seconds": seconds, "report": report.to_dict(), "vs_original": ratios, "table": report.table()}


def main() -> int:
    """Train, publish and optimize both models; write the figures."""
    import torch

    torch.set_num_threads(1)
    from twinkle_core import RunStore, Trainer
    from twinkle_vision.samples import write_digits, write_shapes

    results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                           "threads": 1}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["TWINKLE_HOME"] = str(work / "home")
        os.environ.setdefault("TWINKLE_USER", "bench")
        digits = write_digits(work / "digits")
        start = time.perf_counter()
        trained = Trainer("resnet18", task="image_classification", verbose=False,
                          hyperparams={"max_epochs": 6, "use_mmap": True, "progress_bar": False}).fit(str(digits))
        RunStore().publish(trained.run_uri, "digits18")
        results["resnet18_digits"] = {"train_seconds": round(time.perf_counter() - start, 1),
                                      "rk3588": _report("twinkle://models/digits18", "rk3588"),
                                      "onnx-int8": _report("twinkle://models/digits18", "onnx-int8")}
        shapes = write_shapes(work / "shapes", train=240, val=40, size=128, seed=0).parent
        start = time.perf_counter()
        trained = Trainer("yolov8n", verbose=False, progress_bar=False,
                          hyperparams={"image_size": 128, "batch_size": 16, "effective_batch_size": 16,
                                       "max_epochs": 20, "close_mosaic": 3}).fit(str(shapes))
        RunStore().publish(trained.run_uri, "yolov8n")
        results["yolov8n_shapes"] = {"train_seconds": round(time.perf_counter() - start, 1),
                                     "rk3588": _report("twinkle://models/yolov8n", "rk3588")}
    out = Path(__file__).with_name("results") / "edge.json"
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
