"""A detector's exported output turned into prediction rows with NumPy, as its card's ``output["decoding"]`` says.

Decoding ``boxes`` (an ultralytics detector: ``YoloDetector.export_decoding`` writes it): the output is
``batch × (4 + classes) × anchors`` — per anchor a box (centre x, centre y, width, height, in input pixels) and a
score per class. Per image: anchors whose best class score exceeds ``confidence`` are kept with that one class;
the ``max_nms`` best of them go through greedy non-maximum suppression per class (boxes of different classes are
offset by ``class_offset`` pixels so they never overlap; a box is dropped when its IoU with a better-scored kept
box exceeds ``iou``); the ``max_det`` best survive, best first. Boxes are mapped back through the image's
letterbox (``images.Letterbox``) and clipped to the image. All in float32, as ultralytics computes it, so rows
equal the run's own ``predict`` rows up to the export's float differences. A row is the image's ``width``,
``height`` and ``boxes`` (``class``, ``score`` to 5 decimals, ``box`` ``[x1, y1, x2, y2]`` to 2).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.inference.images import Letterbox

DECODINGS = {"boxes": ("confidence", "iou", "max_det")}
"""The decodings core runs itself, with the card keys each needs."""


def decodes_itself(decoding: dict[str, Any] | None) -> bool:
    """Whether core decodes an output described by ``decoding`` itself (a kind of ``DECODINGS`` with its keys)."""
    needed = DECODINGS.get(str((decoding or {}).get("kind")))
    return needed is not None and all((decoding or {}).get(key) is not None for key in needed)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Indices of ``boxes`` (``N × 4`` corners, float32) kept by greedy NMS, best score first (torchvision's
    ``nms``: a box is suppressed when its IoU with a kept one exceeds ``iou``)."""
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    areas = (x2 - x1) * (y2 - y1)
    suppressed = np.zeros(len(boxes), dtype=bool)
    kept = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        kept.append(i)
        rest = order[position + 1:]
        rest = rest[~suppressed[rest]]
        if not len(rest):
            continue
        width = np.maximum(np.float32(0), np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        height = np.maximum(np.float32(0), np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = width * height
        overlap = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest[overlap.astype(np.float64) > iou]] = True
    return np.asarray(kept, dtype=np.int64)


def box_rows(outputs: np.ndarray, letterboxes: Sequence[Letterbox], class_names: Sequence[str],
             decoding: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per image of a detector's ``outputs`` (see the module docstring).

    Raises:
        TwinkleError: the output's shape is not ``batch × (4 + classes) × anchors`` for the card's classes.
    """
    values = np.asarray(outputs[0] if isinstance(outputs, (list, tuple)) else outputs, dtype=np.float32)
    classes = len(class_names)
    if values.ndim != 3 or values.shape[1] != 4 + classes:
        raise TwinkleError(f"the detector's output has shape {values.shape}; its card's decoding reads "
                           f"batch × (4 + {classes} classes) × anchors: export the run again")
    confidence, iou = float(decoding["confidence"]), float(decoding["iou"])
    max_det, max_nms = int(decoding["max_det"]), int(decoding.get("max_nms", 30000))
    offset = np.float32(decoding.get("class_offset", 7680))
    rows = []
    for prediction, boxed in zip(values, letterboxes):
        anchors = prediction.T  # anchors × (4 + classes)
        anchors = anchors[anchors[:, 4:].max(axis=1) > confidence]
        half = anchors[:, 2:4] / np.float32(2)
        corners = np.concatenate([anchors[:, :2] - half, anchors[:, :2] + half], axis=1)
        best = anchors[:, 4:].argmax(axis=1)
        score = anchors[:, 4:].max(axis=1)
        keep = score > confidence
        corners, score, best = corners[keep], score[keep], best[keep]
        if len(score) > max_nms:
            top = np.argsort(-score, kind="stable")[:max_nms]
            corners, score, best = corners[top], score[top], best[top]
        chosen = non_max_suppression(corners + best[:, None].astype(np.float32) * offset, score, iou)[:max_det]
        rows.append(_row(corners[chosen], score[chosen], best[chosen], boxed, class_names))
    return rows


def _row(corners: np.ndarray, scores: np.ndarray, classes: np.ndarray, boxed: Letterbox,
         class_names: Sequence[str]) -> dict[str, Any]:
    """An image's row: boxes mapped back through its letterbox to its pixels and clipped to it."""
    gain_y, gain_x = boxed.gain
    left, top = boxed.pad
    corners = corners.copy()
    corners[:, [0, 2]] = (corners[:, [0, 2]] - np.float32(left)) / np.float32(gain_x)
    corners[:, [1, 3]] = (corners[:, [1, 3]] - np.float32(top)) / np.float32(gain_y)
    corners[:, [0, 2]] = corners[:, [0, 2]].clip(0, boxed.width)
    corners[:, [1, 3]] = corners[:, [1, 3]].clip(0, boxed.height)
    names = [str(c) for c in class_names]
    return {"width": boxed.width, "height": boxed.height, "boxes": [
        {"class": names[int(c)], "score": round(float(s), 5), "box": [round(float(v), 2) for v in corner]}
        for corner, s, c in zip(corners, scores, classes)]}


__all__ = ["DECODINGS", "box_rows", "decodes_itself", "non_max_suppression"]
