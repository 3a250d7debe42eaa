"""OpenCV's bilinear resize (``cv2.resize(..., interpolation=cv2.INTER_LINEAR)``) of uint8 images, in NumPy.

A detector trained through ultralytics saw its images resized by OpenCV; an export predicted without OpenCV must
feed the graph the same pixels. OpenCV computes the bilinear weights in 11-bit fixed point: each output pixel
samples the source at ``(x + 0.5) · scale − 0.5`` (``scale`` = source / output side), horizontal weights clamped at
the borders, vertical ones not (the border row is read twice instead), then combines two source rows as its
vectorised kernel does — each row's value shifted right by 4, multiplied by its 16-bit weight keeping the high half,
summed, and rounded by 2 bits. Measured against opencv-python 5.0 on random images of every scaling direction
(2× reductions included), the result is bit-identical; another OpenCV build may differ by one grey level in a few
pixels.
"""

from __future__ import annotations

import numpy as np

COEF_BITS = 11
"""OpenCV's ``INTER_RESIZE_COEF_BITS``: the weights are integers out of ``2 ** COEF_BITS``."""


def _weights(source: int, target: int, clamp: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The two source indices and their fixed-point weights of each of ``target`` output positions."""
    scale = 1.0 / (target / source)  # OpenCV's scale: the inverse of its inverse scale, in double precision
    position = ((np.arange(target, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    first = np.floor(position).astype(np.int64)
    fraction = (position - first.astype(np.float32)).astype(np.float32)
    if clamp:  # horizontally: an output pixel past the border takes the border pixel whole
        below, above = first < 0, first >= source - 1
        fraction[below | above] = 0
        first[below] = 0
        first[above] = source - 1
    second = np.clip(first + 1, 0, source - 1)
    first = np.clip(first, 0, source - 1)
    one = np.float32(1 << COEF_BITS)
    weight1 = np.rint(fraction * one).astype(np.int64)
    weight0 = np.rint((np.float32(1) - fraction) * one).astype(np.int64)
    return first, second, weight0, weight1


def resize_linear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """``image`` (``H × W`` or ``H × W × C`` uint8) resized to ``width`` × ``height`` as OpenCV's ``INTER_LINEAR``
    resizes it (see the module docstring); the result has the input's number of dimensions."""
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ValueError(f"resize_linear takes uint8 images, got {array.dtype}")
    flat = array.ndim == 2
    pixels = array[..., None] if flat else array
    rows, columns = pixels.shape[:2]
    if (rows, columns) == (height, width):
        return array.copy()
    x0, x1, a0, a1 = _weights(columns, width, clamp=True)
    y0, y1, b0, b1 = _weights(rows, height, clamp=False)
    source = pixels.astype(np.int64)
    across = source[:, x0] * a0[None, :, None] + source[:, x1] * a1[None, :, None]  # rows × width × C, scaled 2^11
    top, bottom = across[y0], across[y1]
    mixed = (((top >> 4) * b0[:, None, None]) >> 16) + (((bottom >> 4) * b1[:, None, None]) >> 16)
    out = np.clip((mixed + 2) >> 2, 0, 255).astype(np.uint8)
    return out[..., 0] if flat else out


__all__ = ["COEF_BITS", "resize_linear"]
