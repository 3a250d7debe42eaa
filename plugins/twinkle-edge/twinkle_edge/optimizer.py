"""``EdgeOptimizer``: prune a trained model, fine-tune it back through the ordinary Twinkle engine, quantize
it to INT8 and measure every stage (``EdgeReport``).

``model`` is a published model (``twinkle://models/NAME``), a run (``twinkle://user/project/runN``) or a
checkpoint file; its algorithm, data and processor come from the checkpoint's record, so recovery fine-tuning
and INT8 calibration use the model's own data unless ``calibration_data=`` is given. The pruned network is
saved as a checkpoint of tensors plus Twinkle's record with ``structure`` (no pickled modules); the fine-tuning
is a ``finetune`` child run of the model's run, and the report is saved with it.

Targets (``twinkle edge targets``): ``onnx-int8`` (onnxruntime static QDQ, per channel, calibrated on real
samples), ``onnx`` (float), and the Rockchip platforms (``rk3588`` and friends: a ``.rknn`` from rknn-toolkit2's
own quantizer, run in its simulator on validation samples; with ``target_device=`` also on an attached board,
with rknn's ``eval_perf`` and ``eval_memory``, otherwise board figures are reported as not measured). Detectors
are converted with their raw per-scale maps and decoded on the CPU (``Algorithm.quantizable_export``).
"""

from __future__ import annotations

import copy
import io
import os
from typing import Any

import numpy as np
import torch

from twinkle_core import RunStore, Trainer, load_torch_file
from twinkle_core.data import atomic_write_bytes, require_exists
from twinkle_core.errors import DataNotFoundError, TwinkleError
from twinkle_edge.measure import latency_ms, macs, onnx_outputs, parameters, similarity
from twinkle_edge.pruning import prune_algorithm
from twinkle_edge.report import EdgeReport, Stage
from twinkle_edge.targets import TARGETS

SAMPLES = 512
"""Validation samples every stage is measured on (the same ones for each; all of them in a smaller set)."""


class EdgeTargetError(TwinkleError):
    """A target this installation cannot convert for."""


class EdgeOptimizer:
    """Prune, fine-tune back, quantize and measure a trained model for an edge target.

    Args:
        model: ``twinkle://models/NAME``, a run URI or a checkpoint file.
        target: ``rk3588`` (or another Rockchip platform), ``onnx-int8`` or ``onnx`` (``twinkle edge targets``).
        pruning_ratio: the share of channels removed from each prunable group (0 skips pruning).
        quantize: ``"int8"`` or ``None`` (float); ``onnx-int8`` implies INT8.
        calibration_data: data to fine-tune and calibrate on (default: the model's own).
        finetune_epochs: epochs of recovery fine-tuning after pruning (0: none).
        channel_multiple: channels left in each pruned layer are a multiple of this (8 by default; 1 keeps
            exactly the ratio) — kernels are much slower on unaligned channel counts.
        target_device: the adb id of an attached board (``adb devices``) for a Rockchip target: the ``.rknn``
            then also runs there, with rknn's ``eval_perf`` and ``eval_memory``; without one, board figures are
            reported as not measured.
        home: the run store (default ``$TWINKLE_HOME``).
        **options: hyperparameters of the fine-tuning run (``lr``, ``batch_size``, ...).
    """

    def __init__(self, model: str, target: str = "rk3588", pruning_ratio: float = 0.3,
                 quantize: str | None = "int8", calibration_data: str | None = None, finetune_epochs: int = 5,
                 channel_multiple: int = 8, target_device: str | None = None, home: str | None = None,
                 **options: Any) -> None:
        """Check the target and the numbers now (nothing is loaded yet)."""
        if target not in TARGETS:
            raise EdgeTargetError(f"unknown target {target!r}; this installation converts for: "
                                  f"{', '.join(sorted(TARGETS))} (twinkle edge targets)")
        if not 0 <= pruning_ratio < 1:
            raise TwinkleError(f"pruning_ratio={pruning_ratio!r} must be in [0, 1)")
        if quantize not in ("int8", None):
            raise TwinkleError(f"quantize={quantize!r}: choose 'int8' or None")
        if target_device is not None and TARGETS[target]["converter"] != "rknn":
            raise TwinkleError(f"target_device={target_device!r} is for Rockchip boards; target {target!r} runs on "
                               "this machine (drop target_device, or pick a Rockchip target)")
        self.model, self.target, self.pruning_ratio = model, target, pruning_ratio
        if int(channel_multiple) < 1:
            raise TwinkleError(f"channel_multiple={channel_multiple!r} must be 1 or more (8 keeps kernels fast)")
        self.target_device, self.channel_multiple = target_device, int(channel_multiple)
        self.quantize = TARGETS[target]["quantize"] and quantize == "int8"
        self.calibration_data, self.finetune_epochs = calibration_data, int(finetune_epochs)
        self.home, self.options = home, options
        self._folder = "."
        self._batches: list[Any] = []

    def optimize(self) -> EdgeReport:
        """Run every stage; returns the report (also saved as JSON and PNG with the fine-tuning run)."""
        store = RunStore(self.home)
        source = Trainer.from_checkpoint(_checkpoint_ref(self.model), self.calibration_data, mode="finetune",
                                         home=self.home, verbose=False)
        if not (source.new_data or self.calibration_data):
            raise TwinkleError(f"{self.model} records no data to fine-tune and calibrate on; pass "
                               "calibration_data='URI of data like the model was trained on'")
        if not self.calibration_data:
            try:
                require_exists(source.new_data, "the model's data")
            except DataNotFoundError:
                raise TwinkleError(f"{self.model} was trained on {source.new_data}, which is not there any more; "
                                   "pass calibration_data='URI of data like the model was trained on'") from None
        original, prepared, run_uri, checkpoint = source.model_for_export()
        folder = store.path(store.run_id(run_uri), "edge") if run_uri else os.path.join(
            os.path.dirname(os.path.abspath(checkpoint or ".")), "edge")
        os.makedirs(folder, exist_ok=True)
        batches = self._batches = _batches(original, prepared, SAMPLES)
        inputs = np.concatenate([_array(original.export_inputs(b)) for b in batches])
        example = torch.as_tensor(inputs[:1])
        reference = _first_output(original.export_module(), inputs)
        self._folder = folder
        stages = [self._stage("original", source, original, example, inputs, reference, run_uri)]
        pruned, info = copy.deepcopy(original), None
        if self.pruning_ratio:
            info = prune_algorithm(pruned, example, self.pruning_ratio, self.channel_multiple)
        pruned_ckpt = self._save_pruned(checkpoint, pruned, info, folder)
        pruned_trainer = Trainer.from_checkpoint(pruned_ckpt, self.calibration_data, mode="finetune",
                                                 home=self.home, verbose=False)
        stages.append(self._stage("pruned", pruned_trainer, pruned, example, inputs, reference, run_uri))
        tuned_trainer = Trainer.from_checkpoint(pruned_ckpt, self.calibration_data, mode="finetune", home=self.home,
                                                verbose=False,
                                                hyperparams={"max_epochs": max(1, self.finetune_epochs),
                                                             "progress_bar": False, **self.options})
        result = tuned_trainer.fit() if self.finetune_epochs else None
        tuned, _, tuned_run, _ = tuned_trainer.model_for_export()
        stages.append(self._stage("fine-tuned", tuned_trainer, tuned, example, inputs, reference, tuned_run))
        rknn = TARGETS[self.target]["converter"] == "rknn"
        if self.quantize and not rknn:
            stages.append(self._stage("quantized", tuned_trainer, tuned, example, inputs, reference, tuned_run,
                                      quantize=True))
        if rknn:
            stages.append(self._rknn_stage(tuned, prepared, batches, example, inputs, reference, tuned_run))
        report = EdgeReport(model=self.model, target=self.target, pruning=info, stages=stages,
                            finetune_run=result.run_uri if result else None, source_run=run_uri)
        if result is not None:
            report.save(store.run_dir(store.run_id(result.run_uri)))
        return report

    run = optimize

    def _save_pruned(self, checkpoint: str | None, pruned: Any, info: dict[str, Any] | None, folder: str) -> str:
        """The pruned network as a checkpoint: its tensors and the original record, with ``structure``."""
        if checkpoint is None:
            raise TwinkleError(f"{self.model} has no checkpoint to prune")
        original = load_torch_file(checkpoint)
        record = {**original["twinkle"], "structure": {"pruned": info} if info else None}
        path = os.path.join(folder, f"pruned-{self.pruning_ratio:g}.ckpt")
        buffer = io.BytesIO()
        torch.save({"state_dict": pruned.state_dict(), "twinkle": record, "global_step": 0, "epoch": 0}, buffer)
        atomic_write_bytes(path, buffer.getvalue())  # never a half-written checkpoint
        return path

    def _rknn_stage(self, model: Any, prepared: Any, batches: list[Any], example: torch.Tensor, inputs: np.ndarray,
                    reference: np.ndarray, run: str | None) -> Stage:
        """Convert to ``.rknn`` (rknn's INT8 quantizer calibrated on training samples, or float) — in the
        algorithm's quantizable form where it has one (a detector's raw maps, decoded here on the CPU) — run the
        validation samples in rknn's simulator and keep its per-layer accuracy analysis of one sample beside the
        artefact. Latency needs the board: not measured here."""
        from twinkle_edge.rknn.convert import RKNNSession

        split = model.quantizable_export()
        module, decode = split if split else (model.export_module(), None)
        calibration = np.concatenate([_array(model.export_inputs(b)) for b in _batches(model, prepared, 64, "train")])
        output = os.path.join(self._folder, f"model-{self.target}{'-int8' if self.quantize else ''}.rknn")
        analysis = os.path.join(self._folder, f"rknn-accuracy-analysis-{self.target}")
        with RKNNSession() as session:
            result = session.build_module(module.eval(), example, output, self.target, self.quantize, calibration)
            raw = session.run(inputs)
            session.analyse(inputs[0], analysis)
            on_board = session.board(output, self.target, self.target_device, inputs) if self.target_device else None
        outputs = _decoded(raw, decode)
        converted_from = _first_output(model.export_module(), inputs)
        metric, value = _metric(model, batches, outputs)
        board: Any = "not measured (no target_device attached)"
        if on_board is not None:
            board_outputs = _decoded(on_board["outputs"], decode)
            board = {"device": self.target_device, "perf": on_board["perf"], "memory": on_board["memory"],
                     "metric": _metric(model, batches, board_outputs)[1],
                     "vs_pytorch_model": similarity(converted_from, board_outputs)}
        deployed = model.export_module()
        return Stage(name="converted", parameters=parameters(deployed), macs=macs(deployed, example),
                     file_bytes=int(result["rknn_bytes"]), latency_ms=None, metric=metric, metric_value=value,
                     similarity=similarity(reference, outputs), artefact=output, run=run,
                     notes={"runtime": "rknn-toolkit2 simulator", "samples": int(len(outputs)),
                            "vs_pytorch_model": similarity(converted_from, outputs),
                            "decoded_on_cpu": decode is not None,
                            "quantized": self.quantize, "board": board,
                            "accuracy_analysis": os.path.join(analysis, "error_analysis.txt"),
                            "seconds": result["seconds"]})

    def _stage(self, name: str, trainer: Trainer, model: Any, example: torch.Tensor, inputs: np.ndarray,
               reference: np.ndarray, run: str | None, quantize: bool = False) -> Stage:
        output = os.path.join(self._folder, f"{name}{'-int8' if quantize else ''}.onnx")
        exported = trainer.export(format="onnx", quantize=quantize, output=output)
        outputs = onnx_outputs(exported.path, inputs)
        metric, value = _metric(model, self._batches, outputs)  # every stage on the same samples
        deployed = model.export_module()
        return Stage(name=name, parameters=parameters(deployed), macs=macs(deployed, example),
                     file_bytes=exported.size_bytes, latency_ms=latency_ms(exported.path, inputs),
                     metric=metric, metric_value=value,
                     similarity=similarity(reference, outputs), artefact=exported.path, run=run)


def _checkpoint_ref(model: str) -> str:
    """A published model's checkpoint (``twinkle://models/NAME`` → its ``model.ckpt``); others as given."""
    if model.startswith("twinkle://models/") and not model.endswith(".ckpt"):
        return model.rstrip("/") + "/model.ckpt"
    return model


def _batches(algorithm: Any, prepared: Any, count: int = 256, split: str = "val") -> list[Any]:
    """Validation (or training) batches holding up to ``count`` samples, as the algorithm's loaders collate them."""
    from torch.utils.data import DataLoader

    batches, seen = [], 0
    for batch in DataLoader(getattr(prepared, split), batch_size=32, shuffle=False, collate_fn=prepared.collate_fn):
        batches.append(batch)
        seen += len(algorithm.export_inputs(batch))
        if seen >= count:
            break
    return batches


def _array(inputs: Any) -> np.ndarray:
    return np.asarray(torch.as_tensor(inputs), dtype=np.float32)


def _decoded(raw: list[np.ndarray], decode: Any) -> np.ndarray:
    """A converted model's outputs as the export module gives them (decoded on the CPU where it was split)."""
    if decode is None:
        return raw[0]
    with torch.no_grad():
        return decode([torch.from_numpy(r) for r in raw]).numpy()


def _first_output(module: Any, inputs: np.ndarray) -> np.ndarray:
    """``module``'s (first) output for ``inputs``, in batches."""
    module.eval()
    parts = []
    with torch.no_grad():
        for start in range(0, len(inputs), 32):
            out = module(torch.from_numpy(inputs[start:start + 32]))
            parts.append((out[0] if isinstance(out, (tuple, list)) else out).float().numpy())
    return np.concatenate(parts)


def _metric(algorithm: Any, batches: list[Any], outputs: np.ndarray) -> tuple[str | None, float | None]:
    """The algorithm's export metric (accuracy, mAP50, ...) of ``outputs`` (one row per sample of ``batches``)."""
    pairs, start = [], 0
    for batch in batches:
        size = len(algorithm.export_inputs(batch))
        pairs.append((batch, torch.from_numpy(outputs[start:start + size])))
        start += size
    values = algorithm.export_evaluate(pairs)
    name = next(iter(values), None)
    return name, (values[name] if name else None)
