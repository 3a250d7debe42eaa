"""YOLO detectors in Twinkle's engine: ultralytics' model, loss, datasets and metrics, Lightning's loop.

What ultralytics' own trainer does and this module reproduces: AdamW with ``lr0 = 0.002 × 5 / (4 + nc)``
("optimizer=auto" below 10k iterations), three parameter groups (decayed weights, undecayed norm weights,
undecayed biases) with gradient accumulation to a nominal batch of 64, a linear learning-rate decay to
``lrf``, a warm-up of ``max(3 epochs, 100 steps)`` for learning rate and momentum, gradient clipping at 10,
an exponential moving average of the weights (validated, checkpointed and exported), and mosaic turned off
for the last ``close_mosaic`` epochs. Validation uses ultralytics' ``DetectionValidator`` (NMS, matching,
mAP50 and mAP50-95).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Literal

import numpy as np
import torch
from torch import nn

from twinkle_core import Algorithm
from twinkle_core.data import DataSpec
from twinkle_core.errors import TwinkleError
from twinkle_vision.pretrained import load_ultralytics
from twinkle_vision.yolo import offline

SIZES = ("n", "s", "m", "l", "x")


class YoloDetector(Algorithm):
    """A YOLO detector built from an ultralytics model configuration (random init unless ``weights=``)."""

    task = "object_detection"
    model_config: ClassVar[str] = "yolov8n.yaml"
    prediction_file = "predictions.json"
    optimizer_defaults = {"optimizer": "adamw", "lr": 0.0, "weight_decay": 0.0005, "momentum": 0.9}

    def __init__(
        self,
        config: str | None = None,
        weights: str | None = None,
        lrf: float = 0.01,
        warmup_epochs: float = 3.0,
        warmup_momentum: float = 0.8,
        ema_decay: float = 0.9999,
        box: float = 7.5,
        cls: float = 0.5,
        dfl: float = 1.5,
        close_mosaic: int = 10,
        conf: float = 0.001,
        iou: float = 0.7,
        predict_conf: float = 0.25,
        max_det: int = 300,
    ) -> None:
        """Declare the hyperparameters (ultralytics' names and defaults).

        Args:
            config: an ultralytics model YAML (default: this class's, e.g. ``yolov8n.yaml``).
            weights: what to start from, at any path or URI, never downloaded: a ``yolov8*.pt`` / ``yolo11*.pt``
                as ultralytics releases it (read without running code: ``twinkle_vision.pretrained``), a
                ``.safetensors`` file or a state dict. What does not fit the head built for the data's classes
                starts fresh (the class branch on other classes than the file's, or built at another width); the
                report of what loaded, part by part and why, is the run's ``weights.json``.
            lrf: final learning rate as a fraction of the initial one. ``lr=0`` (the default) picks
                ultralytics' automatic ``0.002 × 5 / (4 + classes)``.
            warmup_epochs: learning-rate and momentum warm-up (at least 100 steps).
            warmup_momentum: momentum at the start of the warm-up.
            ema_decay: the moving average's decay.
            box: box-loss gain. cls: class-loss gain. dfl: distribution-focal-loss gain.
            close_mosaic: turn mosaic augmentation off for this many final epochs.
            conf: confidence threshold of validation NMS. iou: IoU threshold of NMS (validation and predict).
            predict_conf: confidence threshold of ``predict``'s boxes (ultralytics' predict default, 0.25).
            max_det: most boxes per image.
        """
        super().__init__()
        self.config = config or type(self).model_config
        self.weights = weights
        self.lrf, self.warmup_epochs, self.warmup_momentum, self.ema_decay = lrf, warmup_epochs, warmup_momentum, ema_decay
        self.box, self.cls, self.dfl = box, cls, dfl
        self.close_mosaic, self.conf, self.iou = close_mosaic, conf, iou
        self.predict_conf, self.max_det = predict_conf, max_det
        self.ema_model: nn.Module | None = None
        self.register_buffer("ema_updates", torch.zeros((), dtype=torch.long))
        self._validator: Any = None

    # ------------------------------------------------------------------ model
    def hyp(self) -> Any:
        """ultralytics' configuration namespace with this run's values."""
        from ultralytics.cfg import DEFAULT_CFG, get_cfg

        imgsz = int(self.data_spec.extra.get("imgsz", 640)) if self.data_spec else 640
        return get_cfg(DEFAULT_CFG, {"box": self.box, "cls": self.cls, "dfl": self.dfl, "imgsz": imgsz,
                                     "conf": self.conf, "iou": self.iou, "max_det": self.max_det, "plots": False,
                                     "workers": 0})

    def build_model(self, spec: DataSpec) -> nn.Module:
        """ultralytics' ``DetectionModel`` for the data's classes, and its moving average."""
        offline.prepare()
        from ultralytics.nn.tasks import DetectionModel

        if spec.num_classes is None:
            raise TwinkleError(f"{self.config} needs detection data with class names")
        try:
            model = DetectionModel(self.config, ch=3, nc=spec.num_classes, verbose=False)
        except FileNotFoundError:
            raise TwinkleError(f"ultralytics has no model configuration '{self.config}'") from None
        model.args = self.hyp()
        model.names = dict(enumerate(spec.class_names))
        if self.weights:
            self.weights_report = load_ultralytics(model, self.weights, list(spec.class_names))
        self.ema_model = copy.deepcopy(model).eval().requires_grad_(False)
        return model

    def forward(self, x: torch.Tensor) -> Any:
        """The network's raw output (training mode: feature maps; eval: decoded boxes and scores)."""
        return self.model(x)

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """Random images at the data's size."""
        return torch.rand(batch_size, *self.data_spec.input_shape)

    @property
    def monitor(self) -> tuple[str, Literal["min", "max"]]:
        """mAP50-95 picks the best checkpoint."""
        return "val_map50_95", "max"

    def eval_batch_size(self, micro_batch_size: int) -> int:
        """Validation batches as large as training ones (images are big)."""
        return max(micro_batch_size, 16)

    # ----------------------------------------------------------------- steps
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """uint8 images → floats in [0, 1], on the device (ultralytics' ``preprocess_batch``)."""
        batch["img"] = batch["img"].float() / 255
        return batch

    def batch_loss(self, batch: Any) -> torch.Tensor:
        """ultralytics' detection loss (box, class, DFL), summed."""
        if batch["img"].dtype == torch.uint8:
            batch = self.on_after_batch_transfer(batch, 0)
        loss, items = self.model.loss(batch)
        self._items = items
        return loss.sum()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Loss and its parts, logged as ``train_loss``, ``train_box_loss``, ``train_cls_loss``, ``train_dfl_loss``."""
        loss = self.batch_loss(batch)
        size = len(batch["img"])
        self.log("train_loss", loss / size, prog_bar=True, on_step=True, on_epoch=True, batch_size=size)
        items = self._items if isinstance(self._items, dict) else dict(zip(("box_loss", "cls_loss", "dfl_loss"), self._items))
        for name, value in items.items():
            self.log(f"train_{name}", float(value), on_step=False, on_epoch=True, batch_size=size)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Update the moving average after each optimizer step."""
        if self.ema_model is None or int(self.ema_updates) >= self.trainer.global_step:
            return
        self.ema_updates.fill_(self.trainer.global_step)
        decay = self.ema_decay * (1 - math.exp(-int(self.ema_updates) / 2000))
        with torch.no_grad():
            model_state = self.model.state_dict()
            for key, value in self.ema_model.state_dict().items():
                if value.dtype.is_floating_point:
                    value.mul_(decay).add_(model_state[key].detach(), alpha=1 - decay)

    def planned_epochs(self) -> int:
        """The epochs this run trains, as ultralytics' schedules count them: ``max_epochs``, or the epochs that
        ``max_steps`` spans when it alone ends the training (``max_epochs`` -1)."""
        trainer = self.trainer
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            return int(trainer.max_epochs)
        steps = int(trainer.estimated_stepping_batches)  # max_steps (Lightning builds the loader to count)
        batches = trainer.num_training_batches
        if not math.isfinite(batches):  # an iterable dataset without a length: the steps are one long epoch
            return 1
        per_epoch = max(int(batches) // max(trainer.accumulate_grad_batches, 1), 1)
        return max(1, math.ceil(steps / per_epoch))

    def on_train_epoch_start(self) -> None:
        """Turn mosaic off for the final ``close_mosaic`` epochs, as ultralytics does."""
        epochs = self.planned_epochs()
        if self.close_mosaic and self.trainer.current_epoch == max(epochs - self.close_mosaic, 0):
            dataset = self.trainer.train_dataloader.dataset
            if hasattr(dataset, "close_mosaic"):
                dataset.close_mosaic(hyp=copy.copy(self.hyp()))

    def on_validation_epoch_start(self) -> None:
        """A fresh ultralytics ``DetectionValidator`` on the moving average."""
        # ultralytics would create runs/detect/val* in the current directory: its folder is the run's
        self._validator = self._new_validator(Path(self.trainer.default_root_dir) / "ultralytics" / "val")

    def _new_validator(self, save_dir: Path) -> Any:
        """ultralytics' ``DetectionValidator`` for this data's classes, its metrics reset."""
        from ultralytics.models.yolo.detect import DetectionValidator

        validator = DetectionValidator(save_dir=save_dir, args=self.hyp())
        validator.device = self.device
        validator.data = {"names": dict(enumerate(self.data_spec.class_names)), "nc": self.data_spec.num_classes}
        validator.names = validator.data["names"]
        validator.nc = self.data_spec.num_classes
        validator.init_metrics(self._eval_model())
        return validator

    def _eval_model(self) -> nn.Module:
        model = self.ema_model if self.ema_model is not None else self.model
        model.eval()
        return model

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """NMS and matching of the moving average's predictions."""
        with torch.no_grad():
            preds = self._eval_model()(batch["img"])
        self._validator.update_metrics(self._validator.postprocess(preds), batch)

    def on_validation_epoch_end(self) -> None:
        """Log ``val_map50``, ``val_map50_95``, ``val_precision``, ``val_recall``, ``val_fitness``."""
        stats = self._validator.get_stats()
        names = {"metrics/mAP50(B)": "val_map50", "metrics/mAP50-95(B)": "val_map50_95",
                 "metrics/precision(B)": "val_precision", "metrics/recall(B)": "val_recall", "fitness": "val_fitness"}
        self.log_dict({names[k]: float(v) for k, v in stats.items() if k in names}, prog_bar=True)

    def on_test_epoch_start(self) -> None:
        """A fresh validator for the test set (``evaluate``), writing nothing outside a temporary folder."""
        import tempfile

        self._validator = self._new_validator(Path(tempfile.mkdtemp(prefix="twinkle-yolo-test-")))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Testing is validation on the test set."""
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self) -> None:
        """Log ``test_map50``, ``test_map50_95``, ``test_precision``, ``test_recall``, ``test_fitness``; keep the
        per-class average precision and the precision–recall curves for ``evaluation_report``."""
        import shutil

        stats = self._validator.get_stats()
        names = {"metrics/mAP50(B)": "test_map50", "metrics/mAP50-95(B)": "test_map50_95",
                 "metrics/precision(B)": "test_precision", "metrics/recall(B)": "test_recall",
                 "fitness": "test_fitness"}
        self.log_dict({names[k]: float(v) for k, v in stats.items() if k in names})
        box, classes = self._validator.metrics.box, list(self.data_spec.class_names)
        present = [int(i) for i in self._validator.metrics.ap_class_index]
        self._test_results = {
            "per_class": [{"class": classes[c], "ap50": float(box.ap50[i]), "ap50_95": float(box.ap[i]),
                           "precision": float(box.p[i]), "recall": float(box.r[i])} for i, c in enumerate(present)],
            "recall": box.px.tolist() if hasattr(box.px, "tolist") else list(box.px),
            "precision": [list(map(float, row)) for row in box.prec_values],
            "classes": [classes[c] for c in present]}
        shutil.rmtree(self._validator.save_dir, ignore_errors=True)

    def predict_step(self, batch: Any, batch_idx: int) -> list[dict[str, Any]]:
        """Each image's boxes, as ultralytics' predictor finds them (``box_rows``) from the moving average's
        output."""
        with torch.no_grad():
            return self.box_rows(self._eval_model()(batch["img"]), batch)

    def box_rows(self, outputs: Any, batch: Any) -> list[dict[str, Any]]:
        """Each image's row from decoded outputs ``(B, 4 + nc, anchors)`` (or the eval-mode tuple): NMS with
        one class per box (``predict_conf``, ``iou``, ``max_det``, ultralytics' predict settings), boxes scaled
        back from the letterbox to the image's pixels (``width``, ``height``, ``boxes``)."""
        from ultralytics.utils import nms, ops

        found = nms.non_max_suppression(outputs, self.predict_conf, self.iou, max_det=self.max_det)
        names, size, rows = list(self.data_spec.class_names), batch["img"].shape[2:], []
        for i, boxes in enumerate(found):
            height, width = (int(v) for v in batch["ori_shape"][i])
            corners = ops.scale_boxes(size, boxes[:, :4].clone(), (height, width), ratio_pad=batch["ratio_pad"][i])
            rows.append({"width": width, "height": height, "boxes": [
                {"class": names[int(c)], "score": round(float(s), 5), "box": [round(float(v), 2) for v in corner]}
                for corner, s, c in zip(corners, boxes[:, 4], boxes[:, 5])]})
        return rows

    def export_prediction_rows(self, outputs: torch.Tensor, batch: Any) -> list[dict[str, Any]]:
        """An export's decoded outputs read as ``predict`` reads the network's (``box_rows``)."""
        return self.box_rows(outputs.float(), batch)

    def export_decoding(self) -> dict[str, Any]:
        """The card's description of ``box_rows`` for ``twinkle predict model.onnx`` without this plugin: the
        exported head's boxes and class scores, ultralytics' NMS (one class per box, classes kept apart by a
        7680-pixel offset, at most 30,000 boxes into it) with this run's ``predict_conf``, ``iou`` and
        ``max_det``."""
        return {"kind": "boxes", "layout": "batch × (4 + classes) × anchors", "box": "x_center, y_center, width, "
                "height in input pixels", "confidence": float(self.predict_conf), "iou": float(self.iou),
                "max_det": int(self.max_det), "max_nms": 30000, "class_offset": 7680,
                "nms": "per class, greedy by score; each anchor keeps its best class",
                "coordinates": "the letterboxed input's; preprocessing's letterbox is undone to the image's pixels"}

    def prediction_rows(self, outputs: Any, spec: DataSpec) -> list[dict[str, Any]]:
        """``predict_step``'s rows as they are: an image's ``width``, ``height`` and ``boxes`` (``class``,
        ``score``, ``box`` ``[x1, y1, x2, y2]`` in pixels)."""
        return list(outputs)

    @property
    def evaluation_needs_outputs(self) -> bool:
        """ultralytics' validator matches the boxes in the test pass: nothing else is gathered."""
        return False

    def evaluation_report(self, outputs: torch.Tensor, targets: torch.Tensor, spec: DataSpec) -> Any:
        """Per-class AP50, AP50-95, precision and recall (classes with labels in the test set) and the
        precision–recall curve of every class at IoU 0.5 (``pr_curve.png``); the mAPs are the test figures."""
        from twinkle_core import EvaluationReport

        results = getattr(self, "_test_results", None) or {"per_class": [], "recall": [], "precision": [],
                                                            "classes": []}
        return EvaluationReport({}, {"per_class": results["per_class"]},
                                {"pr_curve.png": _pr_curve(results)} if results["precision"] else {})

    # ------------------------------------------------------------- optimizer
    def configure_optimizers(self) -> Any:
        """ultralytics' AdamW groups, weight decay and linear decay (see the module docstring)."""
        nc = self.data_spec.num_classes if self.data_spec else 80
        lr = self.optim.lr or round(0.002 * 5 / (4 + nc), 6)
        norms = tuple(v for k, v in nn.__dict__.items() if "Norm" in k)
        decay, no_decay, biases = [], [], []
        for module in self.model.modules():
            for name, param in module.named_parameters(recurse=False):
                (biases if "bias" in name else no_decay if isinstance(module, norms) else decay).append(param)
        # ultralytics scales decay by batch × accumulate / 64; the detection strategy accumulates to 64
        groups = [{"params": decay, "weight_decay": self.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0},
                  {"params": biases, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=lr, betas=(self.optim.momentum, 0.999),
                                      **self.optimizer_kernel(groups))
        epochs = self.planned_epochs() if self._trainer is not None else 1
        lrf = self.lrf
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda epoch: max(1 - epoch / epochs, 0) * (1.0 - lrf) + lrf)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "epoch"}}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Warm the learning rate (0 → lr) and momentum up over the first steps, then step."""
        steps_per_epoch = max(self.trainer.num_training_batches // max(self.trainer.accumulate_grad_batches, 1), 1)
        warmup = max(round(self.warmup_epochs * steps_per_epoch), 100)
        step = self.trainer.global_step
        if step < warmup:
            for group in optimizer.param_groups:
                target = group["initial_lr"] * (max(1 - epoch / self.planned_epochs(), 0)
                                                * (1.0 - self.lrf) + self.lrf)
                group["lr"] = float(np.interp(step, [0, warmup], [0.0, target]))
                beta = float(np.interp(step, [0, warmup], [self.warmup_momentum, self.optim.momentum]))
                group["betas"] = (beta, group["betas"][1])
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        """Clip the gradient norm at 10 (ultralytics' value) unless the run sets its own."""
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val or 10.0, gradient_clip_algorithm="norm")

    # -------------------------------------------------------- continue/export
    def adapt_checkpoint(self, state_dict: dict[str, Any], old: DataSpec | None, new: DataSpec) -> dict[str, Any]:
        """Continue on data with other classes: class outputs are remapped by name; new classes start fresh.

        Every class-output tensor (the last layer of each scale's classification branch, in the model and its
        moving average) is rebuilt at the new size from the freshly initialised model, then each class that
        both datasets name gets its old row back.
        """
        if old is None or tuple(old.class_names) == tuple(new.class_names):
            return state_dict
        fresh = self.state_dict()
        mapping = {i: old.class_names.index(name) for i, name in enumerate(new.class_names) if name in old.class_names}
        adapted = dict(state_dict)
        for key, value in state_dict.items():
            target = fresh.get(key)
            if target is None or target.shape == value.shape:
                continue
            if value.shape[0] == old.num_classes and target.shape[0] == new.num_classes \
                    and value.shape[1:] == target.shape[1:]:
                rebuilt = target.clone()
                for new_index, old_index in mapping.items():
                    rebuilt[new_index] = value[old_index]
                adapted[key] = rebuilt
        return adapted

    def export_module(self) -> nn.Module:
        """The moving average, fused, with the detection head in export mode (decoded boxes and scores)."""
        from ultralytics.nn.modules import Detect

        model = copy.deepcopy(self._eval_model()).float().eval()
        model = model.fuse() if hasattr(model, "fuse") else model
        for module in model.modules():
            if isinstance(module, Detect):
                module.export, module.format, module.dynamic = True, "onnx", True
        return model

    def export_inputs(self, batch: Any) -> torch.Tensor:
        """Validation images as floats in [0, 1]."""
        images = batch["img"]
        return images.float() / 255 if images.dtype == torch.uint8 else images

    def export_metrics(self, outputs: torch.Tensor, batch: Any) -> dict[str, torch.Tensor]:
        """mAP is not a mean over batches: ``export_evaluate`` computes it over all of them."""
        return {}

    def export_evaluate(self, pairs: Iterable[tuple[Any, torch.Tensor]]) -> dict[str, float]:
        """``map50`` and ``map50_95`` of decoded outputs ``(B, 4 + nc, anchors)`` over all the validation
        batches: ultralytics' NMS and matching, as in validation."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="twinkle-yolo-val-") as folder:
            validator = self._new_validator(Path(folder))
            for batch, outputs in pairs:
                validator.update_metrics(validator.postprocess(outputs.float()), batch)
            stats = validator.get_stats()
        return {"map50": float(stats["metrics/mAP50(B)"]), "map50_95": float(stats["metrics/mAP50-95(B)"])}

    # ---------------------------------------------------------------- edge
    def prunable_network(self) -> tuple[nn.Module, list[nn.Module]]:
        """The detection model with the moving average's weights (what is deployed), its C2f blocks split in
        two convolutions (``C2fSplit``), the detection head kept."""
        from ultralytics.nn.modules import Detect

        from twinkle_vision.yolo.compression import split_c2f

        split_c2f(self.model)
        if self.ema_model is not None:
            split_c2f(self.ema_model)
            self.model.load_state_dict(self.ema_model.state_dict())
        return self.model, [m for m in self.model.modules() if isinstance(m, Detect)]

    def on_pruned(self, network: nn.Module) -> None:
        """The moving average restarts from the pruned network."""
        self.ema_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ema_updates.zero_()

    def quantizable_export(self) -> tuple[nn.Module, Callable[[list[torch.Tensor]], torch.Tensor]]:
        """The export module with its head returning raw per-scale box and class maps, and the CPU decoding
        back to boxes and scores (``twinkle_vision.yolo.compression``)."""
        from twinkle_vision.yolo.compression import decoder, raw_head

        model = self.export_module()
        decode = decoder(model)
        return raw_head(model), decode


def _variant(family: str, size: str) -> type[YoloDetector]:
    name = f"{family}{size}"
    return type(
        name.upper().replace("YOLO", "Yolo"),
        (YoloDetector,),
        {"model_config": f"{name}.yaml", "__module__": __name__,
         "__doc__": f"{name} built from ultralytics' {name}.yaml (random init unless ``weights=``)."},
    )


VARIANTS = {f"{family}{size}": _variant(family, size) for family in ("yolov8", "yolo11") for size in SIZES}
globals().update({cls.__name__: cls for cls in VARIANTS.values()})


def _pr_curve(results: dict[str, Any]) -> bytes:
    """The precision–recall curve of each class at IoU 0.5, and their mean, as a PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    recall, curves = np.asarray(results["recall"]), np.asarray(results["precision"])
    fig, ax = plt.subplots(figsize=(6, 5))
    for name, curve, row in zip(results["classes"], curves, results["per_class"]):
        ax.plot(recall, curve, linewidth=1, label=f"{name} {row['ap50']:.3f}")
    ax.plot(recall, curves.mean(axis=0), linewidth=3, color="blue",
            label=f"all classes {np.mean([r['ap50'] for r in results['per_class']]):.3f} mAP@0.5")
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
