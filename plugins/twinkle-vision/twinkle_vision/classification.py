"""Image classification with timm: the ResNet family and any timm model as ``timm/<name>``.

Models are built from timm's configurations with random initialisation — nothing is downloaded. Pretrained
weights come only from ``weights=``: a timm checkpoint folder, a ``.safetensors`` file or a state dict at any path or
URI (``twinkle_vision.pretrained``). Input channels and classes come from the
data; the model's data config (timm's pretrained cfg: input size, minimum side from its stride, mean and
standard deviation, interpolation, crop) goes to the data processor through ``TimmClassifier.model_input``,
and the normalisation becomes the model's first layer, so the trained and exported models take raw pixel
values in [0, 1]. Augmentation is the data processor's (timm's transforms, per sample).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal

import timm
import torch
from timm.data import DEFAULT_CROP_PCT
from timm.models import get_pretrained_cfg
from torch import nn
from torch.nn import functional as F

from twinkle_core import Algorithm
from twinkle_core.data import DataSpec, ModelInput
from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_core.pretrained import read_config
from twinkle_core.types import Probability

from twinkle_vision.pretrained import load_timm


class Normalized(nn.Module):
    """``net((x - mean) / std)`` with the statistics as buffers; delegates gradient checkpointing."""

    def __init__(self, net: nn.Module, mean: list[float], std: list[float]) -> None:
        """Wrap ``net`` behind a fixed per-channel normalisation."""
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise, then run the network."""
        return self.net((x - self.mean) / self.std)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Forward to timm's ``set_grad_checkpointing``."""
        self.net.set_grad_checkpointing(enable)


class TimmClassifier(Algorithm):
    """Any timm classification model, built from its configuration (``model_name``), trained from scratch.

    Default recipe: AdamW, lr 1e-3, weight decay 0.05, one-cycle schedule; the data processor's timm
    transforms (random-resized-crop, colour jitter) at the input size chosen from the model and the images.
    """

    task = "image_classification"
    timm_name: ClassVar[str] = "resnet50"
    optimizer_defaults = {"lr": 1e-3, "weight_decay": 0.05, "scheduler": "onecycle"}

    def __init__(
        self,
        model_name: str | None = None,
        weights: str | None = None,
        drop_rate: Probability = 0.0,
        label_smoothing: Probability = 0.0,
        normalize: Literal["model", "data"] = "model",
    ) -> None:
        """Declare the hyperparameters.

        Args:
            model_name: a timm model name (default: this class's, e.g. ``resnet50``).
            weights: what to start from, at any path or URI, never downloaded: a timm checkpoint folder
                (``config.json`` and ``model.safetensors``, as timm's ``save_for_hf`` and the Hugging Face hub hold
                them; its ``pretrained_cfg`` sets the input size and normalisation), a ``.safetensors`` file, or a
                PyTorch state dict (``weights_only``). New classes leave the classifier fresh; the report of what
                loaded is the run's ``weights.json``.
            drop_rate: dropout before the classifier.
            label_smoothing: cross-entropy label smoothing.
            normalize: ``"model"`` — the mean and standard deviation of the model's timm config (what its
                pretrained weights expect); ``"data"`` — the training images' own statistics.
        """
        super().__init__()
        name = model_name or type(self).timm_name
        if not timm.is_model(name):
            close = timm.list_models(f"*{name[:4]}*")[:8]
            raise TwinkleError(f"timm has no model '{name}'; similar: {', '.join(close) or 'none'}")
        self.model_name, self.weights, self.normalize = name, weights, normalize
        self.drop_rate, self.label_smoothing = drop_rate, label_smoothing
        self.weights_config = read_config(weights) if weights else {}  # a timm folder's; {} for a file
        found = str(self.weights_config.get("architecture") or name)
        if found.split(".")[0] != name.split(".")[0]:
            raise HyperparameterError(f"'weights' = {weights!r} is a {found} checkpoint, not {name}; use "
                                      f"timm/{found} with it, or weights of {name}")

    def model_input(self) -> ModelInput:
        """timm's data config for ``model_name``: input size, minimum side (its stride), mean and standard
        deviation, interpolation, centre-crop share and whether the size is fixed (ViTs).

        A weights folder's ``pretrained_cfg`` comes first, as timm's ``resolve_data_config`` reads a loaded
        checkpoint's: its ``input_size`` is then the model's configured size (the ceiling of the plan's input size;
        ``reason`` names the folder, for the plan). The minimum side is the architecture's stride, from timm's own
        config for ``model_name``.
        """
        own = get_pretrained_cfg(self.model_name)
        cfg, reason = own, ""
        folder = self.weights_config.get("pretrained_cfg")
        if isinstance(folder, dict) and cfg is not None:  # the checkpoint's own data config comes first
            cfg = replace(cfg, **{k: v for k, v in folder.items() if k in vars(cfg)})
            if folder.get("input_size"):
                height, width = (int(v) for v in cfg.input_size[-2:])
                only = ", fixed_input_size: the only size it takes" if cfg.fixed_input_size else ""
                reason = (f"the input size of weights '{self.weights}' (its config.json's pretrained_cfg.input_size "
                          f"{height}×{width}{only})")
        if cfg is None:
            return ModelInput(name=self.model_name, size=(224, 224), min_size=32, crop_pct=DEFAULT_CROP_PCT)
        size = tuple(int(v) for v in cfg.input_size[-2:])
        return ModelInput(name=self.model_name, size=(size[0], size[1]), min_size=_stride(own),
                          fixed=bool(cfg.fixed_input_size), mean=tuple(cfg.mean), std=tuple(cfg.std),
                          interpolation=str(cfg.interpolation or "bilinear"),
                          crop_pct=float(cfg.crop_pct or DEFAULT_CROP_PCT), reason=reason)

    def build_model(self, spec: DataSpec) -> nn.Module:
        """timm's model for the data's channels and classes, behind its normalisation (see ``normalize``)."""
        if spec.num_classes is None or len(spec.input_shape) != 3:
            raise TwinkleError(f"{self.model_name} needs images with classes, got input shape {spec.input_shape}")
        net = timm.create_model(self.model_name, pretrained=False, num_classes=spec.num_classes,
                                in_chans=spec.in_channels, drop_rate=self.drop_rate)
        if self.weights:
            self.weights_report = load_timm(net, self.weights)
            self.weights_report.notes += self._data_config_notes(spec)
        return Normalized(net, *self._normalization(spec))

    def _data_config_notes(self, spec: DataSpec) -> list[str]:
        """What of a weights folder's ``pretrained_cfg`` this run uses, and where its input size came from."""
        folder = self.weights_config.get("pretrained_cfg")
        if not isinstance(folder, dict):
            return []
        notes = []
        used = {k: folder[k] for k in ("mean", "std", "interpolation", "crop_pct") if k in folder}
        if used:
            where = "normalise inside the model" if self.normalize == "model" else "are not used (normalize='data')"
            notes.append(f"config.json's pretrained_cfg {', '.join(f'{k} {v}' for k, v in used.items())}: "
                         f"interpolation and crop prepare the data; mean and std {where}")
        if folder.get("input_size"):
            height, width = (int(v) for v in folder["input_size"][-2:])
            side = int(spec.input_shape[-1])
            fixed = " (fixed_input_size: the only size it takes)" if folder.get("fixed_input_size") else \
                ", the ceiling of the plan's input size (the images' own size below it; image_size= overrides)"
            notes.append(f"config.json's pretrained_cfg.input_size {height}×{width} is this model's configured "
                         f"size{fixed}; this run's input size is {side} (plan.json's input_size says why)")
        return notes

    def _normalization(self, spec: DataSpec) -> tuple[list[float], list[float]]:
        """The mean and standard deviation the model's first layer applies, one per input channel."""
        channels = spec.in_channels
        wanted = self.model_input()
        if self.normalize == "model" and wanted.mean is not None and wanted.std is not None:
            mean, std = list(wanted.mean), list(wanted.std)
            if channels != len(mean):  # a grey model from an RGB config: the channels' average (as timm does)
                mean, std = [sum(mean) / len(mean)] * channels, [sum(std) / len(std)] * channels
            return mean, std
        return list(spec.extra.get("mean", [0.5] * channels)), list(spec.extra.get("std", [0.25] * channels))

    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy with optional label smoothing."""
        return F.cross_entropy(outputs, targets, label_smoothing=self.label_smoothing)


def _stride(cfg: object) -> int:
    """A timm architecture's total stride from its own config (input side over pooled side, rounded up to a power
    of two: ``resnet10t``'s 176 / 6 is 32); 32 where the config does not say."""
    size = getattr(cfg, "input_size", None)
    pool = getattr(cfg, "pool_size", None)
    if not size or not pool or not pool[0]:
        return 32
    return 2 ** math.ceil(math.log2(max(int(size[-2]) / int(pool[0]), 1)))


def _resnet(depth: int) -> type[TimmClassifier]:
    cls = type(
        f"ResNet{depth}",
        (TimmClassifier,),
        {"timm_name": f"resnet{depth}", "__doc__": f"ResNet-{depth} (timm ``resnet{depth}``), random init unless "
                                                    "``weights=`` is given.", "__module__": __name__},
    )
    return cls


ResNet18 = _resnet(18)
ResNet34 = _resnet(34)
ResNet50 = _resnet(50)
ResNet101 = _resnet(101)
ResNet152 = _resnet(152)
