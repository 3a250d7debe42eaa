"""Input size and per-sample transforms for image classification.

``choose_size`` picks the network's input side from the user's ``image_size``, the model's data config
(``ModelInput``: timm's ``input_size``, its minimum side, a fixed size) and the images'
own resolution, and says why. Images are stored square at ``store_side(size, crop_pct)`` (timm's resize before
its centre crop); ``TrainTransform`` applies timm's training transforms (random-resized-crop, flips,
colour jitter, RandAugment-style policies) and ``EvalTransform`` the centre crop. Both return floats in
[0, 1]: normalisation is part of the model, so exported models take raw pixels.

Both also transform a whole batch at once (``batch``: a ``B × C × S × S`` uint8 tensor gathered by indexing, no
Python per sample): the centre crop is one slice; the training transforms draw every sample's crop box, flips and
colour factors as tensors (timm's random-resized-crop rule: ten tries of area and log-ratio, then the whole image),
resample every crop in one ``grid_sample`` call (the flips are the sign of its affine map) and jitter brightness,
contrast and saturation as torchvision's ``ColorJitter`` computes them. RandAugment-style policies are PIL
operations: with ``auto_augment`` set, ``TrainTransform.batch`` is ``None`` and images go one by one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from twinkle_core.data import DataError, ModelInput
from twinkle_core.planning import Decision

DEFAULT_MIN_SIDE = 32
"""The smallest side used when the model states none (the total stride of ResNet-like networks)."""


def choose_size(image_size: int | None, model: ModelInput | None, median_side: int, described: str) -> Decision:
    """The input side and the reason, as a plan ``Decision`` named ``input_size``.

    ``image_size`` (the user's) wins; a model with a fixed size gets it; otherwise the images' median shorter
    side, raised to the network's minimum (small images are upsampled) and capped at the model's own size
    (never upsampled past what the model was designed for, nor past the images' own detail). Where the model's
    size comes from elsewhere than its architecture (a weights folder's ``pretrained_cfg``), ``model.reason``
    names the source in the reason.
    """
    name = model.name if model is not None else "the model"
    owner = f"{name}'s"
    minimum = (model.min_size if model is not None else None) or DEFAULT_MIN_SIDE
    if image_size is not None:
        note = f"; below {name}'s minimum {minimum}, features collapse" if image_size < minimum else ""
        return Decision("input_size", image_size, f"image_size={image_size} given (images are {described}){note}")
    if model is not None and model.fixed and model.size is not None:
        side = int(model.size[0])
        why = model.reason or f"{name} takes only {side}×{side}"
        return Decision("input_size", side, f"{why}; images are {described}")
    own = int(model.size[0]) if model is not None and model.size is not None else None
    if median_side < minimum:
        return Decision("input_size", minimum, f"images are {described}: upsampled to {minimum}, the smallest side "
                                               f"{name} can use")
    source = model.reason if model is not None else ""  # where the size comes from, when not the architecture
    if own is not None and median_side > own:
        return Decision("input_size", own, f"{source or owner + ' own input size'}; images are {described}")
    reason = f"the images' own resolution: {described}"
    if own is not None:
        reason += f"; {source or owner + ' own size'} is {own}, but upsampling past the images' detail only " \
                  f"adds cost (pass image_size={own} for it)"
    return Decision("input_size", median_side, reason)


def store_side(size: int, crop_pct: float) -> int:
    """The side images are stored at so that a centre crop of ``size`` keeps ``crop_pct`` of it (timm's rule)."""
    return max(size, int(math.floor(size / crop_pct)))


class EvalTransform:
    """Centre crop of ``size`` from a stored ``C × S × S`` uint8 array, as floats in [0, 1]."""

    def __init__(self, size: int) -> None:
        """Crop to ``size`` × ``size``."""
        self.size = size

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        """The cropped image."""
        side = array.shape[-1]
        top = (array.shape[-2] - self.size) // 2
        left = (side - self.size) // 2
        crop = np.array(array[:, top:top + self.size, left:left + self.size])  # a writable copy (mmap rows are not)
        return torch.from_numpy(crop).float().div_(255)

    @property
    def batch(self) -> Any:
        """``transform_batch`` (a centre crop is always one slice of the batch)."""
        return self.transform_batch

    def transform_batch(self, images: torch.Tensor) -> torch.Tensor:
        """The centre crops of a ``B × C × S × S`` uint8 batch, as floats in [0, 1]."""
        top = (images.shape[-2] - self.size) // 2
        left = (images.shape[-1] - self.size) // 2
        return images[..., top:top + self.size, left:left + self.size].float().div_(255)


class TrainTransform:
    """timm's training transforms on a stored ``C × S × S`` uint8 array, as floats in [0, 1] of ``size``.

    Args:
        size: the output side.
        channels: 1 or 3.
        scale, ratio: random-resized-crop's area and aspect ranges.
        hflip, vflip: flip probabilities.
        color_jitter: timm's colour-jitter strength (0: none; unused when ``auto_augment`` is set).
        auto_augment: a timm policy string (``"rand-m9-mstd0.5"``, ``"augmix-m5"``, ``"original"``), or ``None``.
        interpolation: the resampling filter.
    """

    def __init__(self, size: int, channels: int, scale: tuple[float, float], ratio: tuple[float, float],
                 hflip: float, vflip: float, color_jitter: float, auto_augment: str | None,
                 interpolation: str) -> None:
        """Build the timm transform now, so a bad policy string is refused before training."""
        from timm.data import create_transform

        self.channels, self.size, self.scale, self.ratio = channels, size, tuple(scale), tuple(ratio)
        self.hflip, self.vflip, self.color_jitter, self.interpolation = hflip, vflip, color_jitter, interpolation
        self.auto_augment = auto_augment
        try:
            self.transform = create_transform(
                (channels, size, size), is_training=True, scale=scale, ratio=ratio, hflip=hflip, vflip=vflip,
                color_jitter=color_jitter, auto_augment=auto_augment, interpolation=interpolation,
                mean=(0.5,) * channels, std=(0.25,) * channels,  # only the fill colour of geometric ops
                normalize=False,
            )
        except (AssertionError, ValueError, KeyError, IndexError) as err:
            raise DataError(f"auto_augment={auto_augment!r} is not a timm augmentation policy ({err}); use e.g. "
                            "'rand-m9-mstd0.5', 'augmix-m5' or 'original', or None") from None

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        """One randomly augmented view of the image."""
        from PIL import Image

        image = Image.fromarray(array[0] if self.channels == 1 else array.transpose(1, 2, 0),
                                mode="L" if self.channels == 1 else "RGB")
        out = self.transform(image)
        if not isinstance(out, torch.Tensor):
            out = torch.from_numpy(np.asarray(out))
        return out.float().div_(255)

    @property
    def batch(self) -> Any:
        """``transform_batch`` where the whole batch can be transformed at once (no ``auto_augment`` policy, a
        filter ``grid_sample`` has), else ``None``."""
        if self.auto_augment is not None or self.interpolation not in GRID_MODES:
            return None
        return self.transform_batch

    def transform_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Randomly augmented views of a ``B × C × S × S`` uint8 batch, as floats in [0, 1] of ``size``."""
        import torch.nn.functional as F

        count, side = images.shape[0], images.shape[-1]
        top, left, height, width = crop_boxes(count, images.shape[-2], side, self.scale, self.ratio)
        theta = torch.zeros(count, 2, 3)
        flip_x = torch.where(torch.rand(count) < self.hflip, -1.0, 1.0)
        flip_y = torch.where(torch.rand(count) < self.vflip, -1.0, 1.0)
        theta[:, 0, 0] = width / side * flip_x
        theta[:, 0, 2] = (2 * left + width) / side - 1
        theta[:, 1, 1] = height / images.shape[-2] * flip_y
        theta[:, 1, 2] = (2 * top + height) / images.shape[-2] - 1
        grid = F.affine_grid(theta, [count, images.shape[1], self.size, self.size], align_corners=False)
        out = F.grid_sample(images.float(), grid, mode=GRID_MODES[self.interpolation], padding_mode="border",
                            align_corners=False).clamp_(0, 255).div_(255)
        if self.color_jitter:
            out = jitter(out, self.color_jitter)
        return out


GRID_MODES = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest"}
"""PIL's filters that ``grid_sample`` has (the others take the per-image path)."""


def crop_boxes(count: int, height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float],
               tries: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm's ``RandomResizedCropAndInterpolation.get_params`` for ``count`` images at once: ``(top, left, height,
    width)`` tensors — the first of ``tries`` draws of area (``scale`` × the image's) and log aspect ratio that fits,
    at a uniformly random place; where none fits, the central crop of the image clamped to ``ratio``."""
    area = float(height * width)
    target = torch.empty(count, tries).uniform_(*scale) * area
    aspect = torch.exp(torch.empty(count, tries).uniform_(math.log(ratio[0]), math.log(ratio[1])))
    w = torch.round(torch.sqrt(target * aspect))
    h = torch.round(torch.sqrt(target / aspect))
    fits = (w <= width) & (h <= height) & (w > 0) & (h > 0)
    first = torch.where(fits.any(1), fits.float().argmax(1), torch.full((count,), -1))
    rows = torch.arange(count)
    chosen = first >= 0
    in_ratio = width / height
    if in_ratio < min(ratio):
        fallback_w, fallback_h = float(width), float(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fallback_w, fallback_h = float(round(height * max(ratio))), float(height)
    else:
        fallback_w, fallback_h = float(width), float(height)
    cw = torch.where(chosen, w[rows, first.clamp(min=0)], torch.tensor(fallback_w))
    ch = torch.where(chosen, h[rows, first.clamp(min=0)], torch.tensor(fallback_h))
    top = torch.where(chosen, torch.floor(torch.rand(count) * (height - ch + 1)), torch.floor((height - ch) / 2))
    left = torch.where(chosen, torch.floor(torch.rand(count) * (width - cw + 1)), torch.floor((width - cw) / 2))
    return top, left, ch, cw


def jitter(images: torch.Tensor, strength: float) -> torch.Tensor:
    """torchvision's ``ColorJitter(strength, strength, strength)`` on a float batch in [0, 1]: each image's
    brightness, contrast and saturation factors drawn from ``[1 - strength, 1 + strength]``, applied in a random
    order (one order per batch); saturation leaves grey images as they are."""
    count = images.shape[0]
    factors = torch.empty(3, count, 1, 1, 1).uniform_(max(0.0, 1 - strength), 1 + strength)
    for op in torch.randperm(3).tolist():
        f = factors[op]
        if op == 0:  # brightness: blend with black
            images = (images * f).clamp_(0, 1)
        elif op == 1:  # contrast: blend with the mean of the grey image
            mean = _grey(images).mean(dim=(-3, -2, -1), keepdim=True)
            images = (f * images + (1 - f) * mean).clamp_(0, 1)
        elif images.shape[1] == 3:  # saturation: blend with the grey image
            images = (f * images + (1 - f) * _grey(images)).clamp_(0, 1)
    return images


def _grey(images: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma, as torchvision's ``rgb_to_grayscale`` (the image itself when it has one channel)."""
    if images.shape[1] == 1:
        return images
    r, g, b = images.unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(1)
