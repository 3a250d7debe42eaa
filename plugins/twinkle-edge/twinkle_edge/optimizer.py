""":class:`EdgeOptimizer`: prune a trained model, fine-tune it back through the ordinary Twinkle engine, quantize
it to INT8 and measure every stage (:class:`~twinkle_edge.report.EdgeReport`).

``model`` is a published model (``twinkle://models/NAME``), a run (``twinkle://user/project/runN``) or a
checkpoint file; its algorithm, data and processor come from the checkpoint's record, so recovery fine-tuning
and INT8 calibration use the model's own data unless ``calibration_data=`` is given. The pruned network is
saved as a checkpoint of tensors plus Twinkle's record with ``structure`` (no pickled modules); the fine-tuning
is a ``finetune`` child run of the model's run, and the report is saved with it.

Targets (``twinkle edge targets``): ``onnx-int8`` (onnxruntime static QDQ, per channel, calibrated on real
samples), ``onnx`` (float), and the Rockchip platforms (``rk3588`` and friends: a ``.rknn`` from rknn-toolkit2's
own quantizer, run in its simulator on validation samples; board latency is reported as not measured).
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
from twinkle_edge.pruning import prune_network
from twinkle_edge.report import EdgeReport, Stage
from twinkle_edge.targets import TARGETS

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
        home: the run store (default ``$TWINKLE_HOME``).
        **options: hyperparameters of the fine-tuning run (``lr``, ``batch_size``, ...).
    """

    def __init__(self, model: str, target: str = "rk3588", pruning_ratio: float = 0.3,
                 quantize: str | None = "int8", calibration_data: str | None = None, finetune_epochs: int = 3,
                 home: str | None = None, **options: Any) -> None:
        """Check the target and the numbers now (nothing is loaded yet)."""
        if target not in TARGETS:
            raise EdgeTargetError(f"unknown target {target!r}; this installation converts for: "
                                  f"{', '.join(sorted(TARGETS))} (twinkle edge targets)")
        if not 0 <= pruning_ratio < 1:
            raise TwinkleError(f"pruning_ratio={pruning_ratio!r} must be in [0, 1)")
        if quantize not in ("int8", None):
            raise TwinkleError(f"quantize={quantize!r}: choose 'int8' or None")
        self.model, self.target, self.pruning_ratio = model, target, pruning_ratio
        self.quantize = TARGETS[target]["quantize"] and quantize == "int8"
        self.calibration_data, self.finetune_epochs = calibration_data, int(finetune_epochs)
        self.home, self.options = home, options
        self._folder = "."

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
        inputs, labels = _val_batch(prepared)
        example = torch.as_tensor(inputs[:1])
        with torch.no_grad():
            reference = original.eval()(torch.as_tensor(inputs)).numpy()
        self._folder = folder
        stages = [self._stage("original", source, original, example, inputs, reference, run_uri)]
        pruned, info = copy.deepcopy(original), None
        if self.pruning_ratio:
            info = prune_network(pruned.model, example, self.pruning_ratio)
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
            stages.append(self._rknn_stage(tuned, prepared, example, inputs, labels, reference, tuned_run))
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

    def _rknn_stage(self, model: Any, prepared: Any, example: torch.Tensor, inputs: np.ndarray, labels: np.ndarray,
                    reference: np.ndarray, run: str | None, count: int = 64) -> Stage:
        """Convert to ``.rknn`` (rknn's INT8 quantizer calibrated on training samples, or float), run the
        validation samples in rknn's simulator and keep its per-layer accuracy analysis of one sample beside the
        artefact. Latency needs the board: not measured here."""
        from twinkle_edge.rknn.convert import RKNNSession

        calibration, _ = _val_batch(prepared, count, split="train")
        output = os.path.join(self._folder, f"model-{self.target}{'-int8' if self.quantize else ''}.rknn")
        analysis = os.path.join(self._folder, f"rknn-accuracy-analysis-{self.target}")
        with RKNNSession() as session:
            result = session.build_module(model.export_module(), example, output, self.target, self.quantize,
                                          calibration)
            outputs = session.run(inputs[:count])[0].reshape(len(inputs[:count]), -1)
            session.analyse(inputs[0], analysis)
        with torch.no_grad():
            converted_from = model.eval()(torch.as_tensor(inputs[:count])).numpy()
        classes = outputs.ndim == 2 and outputs.shape[1] > 1 and np.issubdtype(labels.dtype, np.integer)
        return Stage(name="converted", parameters=parameters(model), macs=macs(model.eval(), example),
                     file_bytes=int(result["rknn_bytes"]), latency_ms=None,
                     metric="accuracy" if classes else None,
                     metric_value=float((outputs.argmax(1) == labels[:count]).mean()) if classes else None,
                     similarity=similarity(reference[:count], outputs), artefact=output, run=run,
                     notes={"runtime": "rknn-toolkit2 simulator", "samples": int(len(outputs)),
                            "vs_pytorch_model": similarity(converted_from, outputs),
                            "quantized": self.quantize, "board": "not measured (no target_device attached)",
                            "accuracy_analysis": os.path.join(analysis, "error_analysis.txt"),
                            "seconds": result["seconds"]})

    def _stage(self, name: str, trainer: Trainer, model: Any, example: torch.Tensor, inputs: np.ndarray,
               reference: np.ndarray, run: str | None, quantize: bool = False) -> Stage:
        output = os.path.join(self._folder, f"{name}{'-int8' if quantize else ''}.onnx")
        exported = trainer.export(format="onnx", quantize=quantize, output=output)
        outputs = onnx_outputs(exported.path, inputs)
        return Stage(name=name, parameters=parameters(model), macs=macs(model.eval(), example),
                     file_bytes=exported.size_bytes, latency_ms=latency_ms(exported.path, inputs),
                     metric=exported.metric, metric_value=exported.metric_export,
                     similarity=similarity(reference, outputs), artefact=exported.path, run=run)


def _checkpoint_ref(model: str) -> str:
    """A published model's checkpoint (``twinkle://models/NAME`` → its ``model.ckpt``); others as given."""
    if model.startswith("twinkle://models/") and not model.endswith(".ckpt"):
        return model.rstrip("/") + "/model.ckpt"
    return model


def _val_batch(prepared: Any, count: int = 256, split: str = "val") -> tuple[np.ndarray, np.ndarray]:
    """Up to ``count`` validation (or training) inputs and targets as arrays."""
    from torch.utils.data import DataLoader

    loader = DataLoader(getattr(prepared, split), batch_size=count, shuffle=False, collate_fn=prepared.collate_fn)
    x, y, *_ = next(iter(loader))
    return np.asarray(x, dtype=np.float32), np.asarray(y)
