"""Export, then verify: reload the artefact, run it on real validation inputs, compare with PyTorch."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from twinkle_core.algorithm import Algorithm
from twinkle_core.exporting.base import Exporter, ExportError, ExportResult, ExportVerificationError
from twinkle_core.uris import filesystem

FP32_ATOL = 1e-4
"""Absolute tolerance of an fp32 export (plus the same relative to the output's magnitude)."""


def _batches(dataset: Dataset, batch_size: int, limit: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    seen = 0
    for x, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        if seen >= limit:
            return
        yield x, y
        seen += len(x)


def export_and_verify(
    algorithm: Algorithm,
    exporter: Exporter,
    output: str,
    val: Dataset,
    calibration: Dataset | None,
    *,
    quantize: bool = False,
    max_samples: int = 2048,
    calibration_samples: int = 256,
    options: dict[str, Any] | None = None,
) -> ExportResult:
    """Export ``algorithm`` with ``exporter`` to ``output`` (any URI) and verify it on ``val``.

    fp32 artefacts must match the PyTorch outputs within :data:`FP32_ATOL` (absolute and relative);
    INT8 artefacts are judged by their metric, which is reported. A failed export leaves no file at
    ``output``.

    Raises:
        ExportError: the exporter refused an option; ExportVerificationError: outputs differ.
    """
    if quantize and not exporter.supports_quantize:
        raise ExportError(f"quantize=True is not supported for {exporter.format}; use format='onnx' for INT8")
    module = algorithm.export_module().eval()
    batches = list(_batches(val, 256, max_samples))
    if not batches:
        raise ExportError("no validation samples to verify the export with")
    example = batches[0][0][:1]
    calib = None
    if quantize:
        source = calibration if calibration is not None else val
        calib = [x.numpy() for x, _ in _batches(source, 32, calibration_samples)]
    fs, remote_path = filesystem(output)
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    workdir = tempfile.mkdtemp(prefix="twinkle-export-")
    tmp = os.path.join(workdir, "artefact" + exporter.suffix)
    try:
        details = exporter.export(module, example, tmp, quantize=quantize, calibration=calib, **(options or {}))
        run = exporter.runner(tmp)
        diffs, torch_out, export_out, targets = [], [], [], []
        with torch.no_grad():
            for x, y in batches:
                ref = module(x).float().numpy()
                got = np.asarray(run(x.numpy()), dtype=np.float32).reshape(ref.shape)
                diffs.append(float(np.max(np.abs(ref - got))) if ref.size else 0.0)
                torch_out.append(ref)
                export_out.append(got)
                targets.append(y)
        max_diff = max(diffs)
        ref_all, got_all = np.concatenate(torch_out), np.concatenate(export_out)
        tolerance = FP32_ATOL * (1 + float(np.max(np.abs(ref_all))))
        if not quantize and max_diff > tolerance:
            raise ExportVerificationError(
                f"{exporter.format} export differs from the PyTorch model by {max_diff:.3g} (> {tolerance:.3g}) "
                "on validation inputs; the artefact was not written"
            )
        y_all = torch.cat(targets)
        metrics_ref = algorithm.compute_metrics(torch.from_numpy(ref_all), y_all)
        metrics_got = algorithm.compute_metrics(torch.from_numpy(got_all), y_all)
        metric = next(iter(metrics_ref), None)
        result = ExportResult(
            format=exporter.format,
            path=output,
            quantized=quantize,
            max_abs_diff=max_diff,
            samples=int(len(y_all)),
            metric=metric,
            metric_torch=float(metrics_ref[metric]) if metric else None,
            metric_export=float(metrics_got[metric]) if metric else None,
            size_bytes=os.path.getsize(tmp),
            details=details,
        )
        if metric:
            result.metric_delta = result.metric_export - result.metric_torch  # type: ignore[operator]
        if local:
            os.makedirs(os.path.dirname(os.path.abspath(remote_path)), exist_ok=True)
            os.replace(tmp, remote_path) if _same_device(tmp, remote_path) else _copy_atomic(tmp, remote_path)
        else:
            fs.put_file(tmp, remote_path)
        return result
    finally:
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)


def _same_device(a: str, b: str) -> bool:
    return os.stat(a).st_dev == os.stat(os.path.dirname(os.path.abspath(b))).st_dev


def _copy_atomic(src: str, dst: str) -> None:
    from twinkle_core.store.atomic import atomic_write_bytes

    with open(src, "rb") as handle:
        atomic_write_bytes(dst, handle.read())
