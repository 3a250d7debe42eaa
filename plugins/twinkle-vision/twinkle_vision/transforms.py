"""Input size and per-sample transforms for image classification.

``choose_size`` picks the network's input side from the user's ``image_size``, the model's data config
(``ModelInput``: timm's ``input_size``, its minimum side, a fixed size) and the images'
own resolution, and says why. Images are stored square at ``store_side(size, crop_pct)`` (timm's resize before
its centre crop); ``TrainTransform`` applies timm's training transforms (random-resized-crop, flips,
colour jitter, RandAugment-style policies) and ``EvalTransform`` the centre crop. Both return floats in
[0, 1]: normalisation is part of the model, so exported models take raw pixels.
"""

from __future__ import annotations

import math

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

        self.channels = channels
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
