"""Export, then verify: reload the artefact, run it on real validation inputs, compare with PyTorch."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from twinkle_core.algorithm import Algorithm
from twinkle_core.exporting.base import (Exporter, ExportError, ExportResult, ExportVerificationError, input_size,
                                         input_values, map_inputs)
from twinkle_core.uris import filesystem, is_local

FP32_ATOL = 1e-4
"""Absolute tolerance of an fp32 export (plus the same relative to the output's magnitude); an exporter's
``float_tolerance`` (this by default) is the one applied."""


def _batches(dataset: Dataset, batch_size: int, limit: int, algorithm: Algorithm, collate_fn: Any) -> Iterator[Any]:
    seen = 0
    for batch in DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn):
        if seen >= limit:
            return
        yield batch
        seen += input_size(algorithm.export_inputs(batch))


def export_and_verify(
    algorithm: Algorithm,
    exporter: Exporter,
    output: str,
    val: Dataset,
    calibration: Dataset | None,
    *,
    quantize: bool = False,
    max_samples: int | None = None,
    calibration_samples: int = 256,
    options: dict[str, Any] | None = None,
    collate_fn: Any = None,
    card: dict[str, Any] | None = None,
) -> ExportResult:
    """Export ``algorithm`` with ``exporter`` to ``output`` (any URI) and verify it on ``val``.

    Float artefacts must match the PyTorch outputs within the exporter's ``float_tolerance`` (absolute and
    relative; ``FP32_ATOL`` for fp32 formats); INT8 artefacts are judged by their metric and cosine
    similarity, which are reported. At most ``max_samples`` (default: the exporter's ``verify_samples``)
    validation samples are compared. A failed export leaves no file at ``output``; the exporter is closed.
    ``card`` (the inference card), with the exported inputs' names, dtypes and shapes added, goes into the
    artefact's own metadata where the format has a place for it (``Exporter.describe``), before it is verified.

    Raises:
        ExportError: the exporter refused an option; ExportVerificationError: outputs differ.
    """
    quantize = quantize or exporter.int8_only
    fs, remote_path = filesystem(output)
    local = is_local(fs)
    if local:
        check_export_output(output, remote_path, exporter.folder)
    if quantize and not exporter.supports_quantize:
        raise ExportError(f"quantize=True is not supported for {exporter.format}; use format='onnx' for INT8")
    module = algorithm.export_module().eval()
    split = algorithm.quantizable_export() if exporter.decodes_on_cpu else None
    traced = split[0].eval() if split else module
    limit = exporter.verify_samples if max_samples is None else max_samples
    batches = list(_batches(val, min(64, limit), limit, algorithm, collate_fn))
    if not batches:
        raise ExportError("no validation samples to verify the export with")
    example = map_inputs(algorithm.export_inputs(batches[0]), lambda tensor: tensor[:1])
    calib = None
    if quantize and exporter.calibrates and isinstance(example, dict):
        raise ExportError(f"{type(algorithm).__name__} exports a model with several inputs, which Twinkle does not "
                          "quantize; export it without quantize=True")
    if quantize and exporter.calibrates:
        source = calibration if calibration is not None else val
        calib = [algorithm.export_inputs(b).numpy() for b in _batches(source, 32, calibration_samples, algorithm,
                                                                        collate_fn)]
    workdir = tempfile.mkdtemp(prefix="twinkle-export-")
    tmp = os.path.join(workdir, "artefact" + exporter.suffix)
    try:
        details = exporter.export(traced, example, tmp, quantize=quantize, calibration=calib, **(options or {}))
        if split:
            details["decoded_on_cpu"] = True
        if card is not None:
            card["inputs"] = [{"name": name, "dtype": str(t.dtype).removeprefix("torch."),
                               "shape": ["batch", *t.shape[1:]]} for name, t in _named(example)]
            details["described"] = exporter.describe(tmp, card)
        run = _decoding(exporter.runner(tmp), split[1] if split else None)
        diffs, scale, samples, dot, norm_ref, norm_got = [], 0.0, 0, 0.0, 0.0, 0.0
        pairs_ref: list[tuple[Any, torch.Tensor]] = []
        pairs_got: list[tuple[Any, torch.Tensor]] = []
        with torch.no_grad():
            for batch in batches:
                x = algorithm.export_inputs(batch)
                ref_t = module(*input_values(x))
                ref_t = ref_t[0] if isinstance(ref_t, (tuple, list)) else ref_t
                ref = ref_t.float().numpy()
                got = run(map_inputs(x, lambda tensor: tensor.numpy())).reshape(ref.shape)
                diffs.append(float(np.max(np.abs(ref - got))) if ref.size else 0.0)
                scale = max(scale, float(np.max(np.abs(ref))) if ref.size else 0.0)
                ref64, got64 = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
                dot, norm_ref, norm_got = dot + ref64 @ got64, norm_ref + ref64 @ ref64, norm_got + got64 @ got64
                samples += input_size(x)
                pairs_ref.append((batch, torch.from_numpy(ref)))
                pairs_got.append((batch, torch.from_numpy(got)))
            metrics_ref = algorithm.export_evaluate(pairs_ref)
            metrics_got = algorithm.export_evaluate(pairs_got)
        max_diff = max(diffs)
        tolerance = exporter.float_tolerance * (1 + scale)
        if not quantize and max_diff > tolerance:
            raise ExportVerificationError(
                f"{exporter.format} export differs from the PyTorch model by {max_diff:.3g} (> {tolerance:.3g}) "
                "on validation inputs; the artefact was not written"
            )
        metric = next(iter(metrics_ref), None)
        result = ExportResult(
            format=exporter.format,
            path=output,
            quantized=quantize,
            max_abs_diff=max_diff,
            samples=samples,
            cosine=round(float(dot / (np.sqrt(norm_ref * norm_got) + 1e-12)), 6),
            metric=metric,
            metric_torch=metrics_ref[metric] if metric else None,
            metric_export=metrics_got.get(metric) if metric else None,
            size_bytes=_size(tmp),
            details=details,
        )
        if metric:
            result.metric_delta = result.metric_export - result.metric_torch  # type: ignore[operator]
        if exporter.folder:
            _place_folder(tmp, remote_path, fs, local)
        elif local:
            os.makedirs(os.path.dirname(os.path.abspath(remote_path)), exist_ok=True)
            os.replace(tmp, remote_path) if _same_device(tmp, remote_path) else _copy_atomic(tmp, remote_path)
        else:
            fs.put_file(tmp, remote_path)
        return result
    finally:
        exporter.close()
        shutil.rmtree(workdir, ignore_errors=True)


def check_export_output(output: str, path: str, folder: bool) -> None:
    """A local export's ``output`` can be placed: the nearest folder that exists above it is a writable folder
    (not a file), and the output itself is not a folder where a file goes (nor a file where a folder goes) —
    checked before anything is exported or written.

    Raises:
        ExportError: naming the output, what is in the way and the fix.
    """
    target = os.path.abspath(path)
    if os.path.isdir(target) and not folder:
        raise ExportError(f"output '{output}' is a folder; this format writes one file: give a file path such as "
                          f"'{os.path.join(output, 'model')}'")
    if os.path.isfile(target) and folder:
        raise ExportError(f"output '{output}' is a file; this format writes a folder: give another path")
    parent = os.path.dirname(target)
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ExportError(f"output '{output}' cannot be written: '{parent}' is a file, not a folder; choose an "
                          "output whose folders are folders")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"output '{output}' cannot be written: '{parent}' is not writable by this user; choose a "
                          "writable location")


def _named(example: Any) -> list[tuple[str, torch.Tensor]]:
    """The exported graph's inputs by name: ``input`` for one tensor, the keys of a dict of several."""
    return list(example.items()) if isinstance(example, dict) else [("input", example)]


def _size(path: str) -> int:
    """The bytes of a file, or of every file under a folder."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def _place_folder(tmp: str, target: str, fs: Any, local: bool) -> None:
    """Put the folder ``tmp`` at ``target`` whole: locally by renames (a copy first on another disk; an older
    export there is replaced only once the new one is complete), elsewhere by an upload of every file."""
    if not local:
        fs.put(tmp, target, recursive=True)
        return
    target = os.path.abspath(target)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".export-", dir=parent)
    os.rmdir(staged)
    if _same_device(tmp, target):
        os.replace(tmp, staged)
    else:
        shutil.copytree(tmp, staged)
    if os.path.exists(target):
        old = staged + ".old"
        os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, target)


def _decoding(run: Callable[[np.ndarray], Any], decode: Callable[[list[torch.Tensor]], torch.Tensor] | None
              ) -> Callable[[np.ndarray], np.ndarray]:
    """The runner's output as one float32 array: decoded on the CPU when the module traced was the
    algorithm's quantizable form, else its (first) output."""

    def outputs(batch: np.ndarray) -> np.ndarray:
        got = run(batch)
        if decode is not None:
            parts = got if isinstance(got, (list, tuple)) else [got]
            got = decode([torch.from_numpy(np.asarray(p, dtype=np.float32)) for p in parts]).numpy()
        elif isinstance(got, (list, tuple)):
            got = got[0]
        return np.asarray(got, dtype=np.float32)

    return outputs


def _same_device(a: str, b: str) -> bool:
    return os.stat(a).st_dev == os.stat(os.path.dirname(os.path.abspath(b))).st_dev


def _copy_atomic(src: str, dst: str) -> None:
    """Copy the artefact onto another disk atomically, readable as a file written with ``open`` is."""
    from twinkle_core.store.atomic import atomic_write_bytes

    with open(src, "rb") as handle:
        atomic_write_bytes(dst, handle.read(), mode=0o666)
