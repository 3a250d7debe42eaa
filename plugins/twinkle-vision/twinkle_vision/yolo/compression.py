"""YOLO in a form edge tools can prune and quantize.

- ``C2fSplit``: ultralytics' C2f (and C3k2) computes its first 1×1 convolution once and ``chunk``s it in
  two; torch-pruning cannot follow a chunk, so the block is rewritten with two convolutions holding the two
  halves — the same outputs, and each half free to lose channels on its own.
- ``raw_head``: the detection head's raw per-scale box (DFL bins) and class maps instead of decoded boxes
  and scores — an INT8 NPU keeps the maps (each in its own range) where the concatenated decoded output, boxes
  in pixels beside scores in [0, 1], collapses — and ``decoder``, the CPU step back to the decoded output.
"""

from __future__ import annotations

import copy
import types
from typing import Callable

import torch
from torch import nn

from twinkle_core.errors import TwinkleError

_ROUTING = ("i", "f", "type", "np")
"""Attributes ultralytics' model parser sets on each layer (its index, inputs, type name, parameters)."""


class C2fSplit(nn.Module):
    """A C2f block whose first convolution is two (``cv0``: the half passed to ``cv2``; ``cv1``: the half the
    bottlenecks refine) — what C2f computes, in a graph torch-pruning can trace."""

    def __init__(self, block: nn.Module) -> None:
        """Split ``block`` (an ultralytics ``C2f`` or subclass), sharing its ``cv2`` and bottlenecks."""
        from ultralytics.nn.modules import Conv

        super().__init__()
        source = block.cv1
        half = source.conv.out_channels // 2
        self.cv0 = Conv(source.conv.in_channels, half, 1, 1)
        self.cv1 = Conv(source.conv.in_channels, half, 1, 1)
        for part, target in ((slice(0, half), self.cv0), (slice(half, 2 * half), self.cv1)):
            target.act = source.act
            with torch.no_grad():
                target.conv.weight.copy_(source.conv.weight[part])
                for name in ("weight", "bias", "running_mean", "running_var"):
                    getattr(target.bn, name).copy_(getattr(source.bn, name)[part])
            target.bn.eps, target.bn.momentum = source.bn.eps, source.bn.momentum
        self.cv2, self.m = block.cv2, block.m
        for name in _ROUTING:
            if hasattr(block, name):
                setattr(self, name, getattr(block, name))
        self.train(block.training)  # new convolutions start in training mode; the block's mode is kept

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Both halves, each bottleneck's output, concatenated into ``cv2``."""
        y = [self.cv0(x), self.cv1(x)]
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


def split_c2f(model: nn.Module) -> int:
    """Rewrite every C2f-style block of an ultralytics model in place as ``C2fSplit`` (already split blocks
    stay as they are); returns how many were split."""
    from ultralytics.nn.modules import C2f

    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, C2f) and type(child).forward is C2f.forward:
                setattr(parent, name, C2fSplit(child))
                count += 1
    return count


def _raw_maps(detect: nn.Module, x: list[torch.Tensor]) -> list[torch.Tensor]:
    """The head's per-scale maps, box then class for each scale: ``(B, 4·reg_max, H, W)``, ``(B, nc, H, W)``."""
    return [out for i in range(detect.nl) for out in (detect.cv2[i](x[i]), detect.cv3[i](x[i]))]


def raw_head(model: nn.Module) -> nn.Module:
    """``model`` (an exportable detection model) with its head returning ``_raw_maps``, in place.

    Raises:
        TwinkleError: an end-to-end (NMS-free) head.
    """
    from ultralytics.nn.modules import Detect

    heads = [m for m in model.modules() if isinstance(m, Detect)]
    for head in heads:
        if head.end2end:
            raise TwinkleError(f"{type(model).__name__}'s end-to-end (NMS-free) head has no raw-map form; export "
                               "it as a float model (quantize=False)")
        head.forward = types.MethodType(_raw_maps, head)
    return model


def decoder(model: nn.Module) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """The CPU step from ``raw_head``'s maps to the decoded ``(B, 4 + nc, anchors)`` output, using a copy of
    ``model``'s head (its strides, anchors and DFL)."""
    from ultralytics.nn.modules import Detect

    head = copy.deepcopy(next(m for m in model.modules() if isinstance(m, Detect))).eval()

    def decode(maps: list[torch.Tensor]) -> torch.Tensor:
        boxes, scores = maps[0::2], maps[1::2]
        size = boxes[0].shape[0]
        preds = {"boxes": torch.cat([b.reshape(size, 4 * head.reg_max, -1) for b in boxes], -1),
                 "scores": torch.cat([s.reshape(size, head.nc, -1) for s in scores], -1), "feats": boxes}
        with torch.no_grad():
            return head._inference(preds)  # noqa: SLF001 — ultralytics' own decoding

    return decode
