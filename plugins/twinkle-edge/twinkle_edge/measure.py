"""What the edge report measures of each stage: parameters, MACs (``torch.utils.flop_counter``), an artefact's
onnxruntime CPU latency (batch 1, one thread, median) and its outputs' similarity to the original model's."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch
from torch import nn


def parameters(net: nn.Module) -> int:
    """How many parameters ``net`` has."""
    return sum(p.numel() for p in net.parameters())


def macs(net: nn.Module, example: torch.Tensor) -> int:
    """Multiply-accumulates of one forward pass of ``example`` (half the FLOPs torch's counter reports)."""
    from torch.utils.flop_counter import FlopCounterMode

    net.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        net(example)
    return int(counter.get_total_flops() // 2)


def session(path: str) -> Any:
    """An onnxruntime CPU session on one thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def onnx_outputs(path: str, inputs: np.ndarray) -> np.ndarray:
    """The artefact's first output for each input (run one by one: exports may fix batch 1)."""
    run = session(path)
    name = run.get_inputs()[0].name
    return np.concatenate([run.run(None, {name: inputs[i:i + 1]})[0] for i in range(len(inputs))])


def latency_ms(path: str, example: np.ndarray, repeats: int = 30) -> float:
    """Median milliseconds of one batch-1 inference (after 3 warm-up runs)."""
    run = session(path)
    feed = {run.get_inputs()[0].name: example[:1]}
    for _ in range(3):
        run.run(None, feed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run.run(None, feed)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def similarity(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """Cosine similarity (of the flattened outputs) and the largest absolute difference; for scores per class
    (one row per sample), the top-1 agreement too."""
    a, b = reference.reshape(len(reference), -1).astype(np.float64), other.reshape(len(other), -1).astype(np.float64)
    cosine = float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
    values = {"cosine": round(cosine, 6), "max_abs_diff": round(float(np.abs(a - b).max()), 6)}
    if reference.ndim == 2:
        values["top1_agreement"] = round(float((a.argmax(1) == b.argmax(1)).mean()), 6)
    return values
