"""Image files as users have them: any Pillow format and mode, EXIF orientation, damaged files found early.

``decode_image`` turns the bytes of one file into a square ``C × S × S`` uint8 array: EXIF orientation
applied, transparency composited on white, palette / 16-bit / CMYK images converted, the shorter side resized
to ``S`` and the centre cropped. ``survey`` opens every file once before training, collecting sizes
and modes and finding files that cannot be decoded (an error naming the first, or skipped and listed).
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from twinkle_core.data import DataError, UnsupportedFormatError

IMAGE_SUFFIXES = ("png", "jpg", "jpeg", "bmp", "gif", "webp", "tif", "tiff")
GREY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
BadFiles = Literal["error", "skip"]


class CorruptImageError(DataError):
    """An image file that Pillow cannot decode."""


def _pillow_errors() -> tuple[type[BaseException], ...]:
    from PIL import Image, UnidentifiedImageError

    # ImportError: a library that patched Image.open to load a plugin for unknown files, without the plugin
    return UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError, EOFError, ImportError


def _open(data: bytes) -> Any:
    """Pillow's own ``Image.open`` on ``data``: ultralytics replaces it with one that tries to install a HEIF
    plugin whenever a file is not an image, so the original is used when it is reachable."""
    from PIL import Image

    opener = Image.open
    module = getattr(opener, "__module__", "PIL.Image")
    if module != "PIL.Image":
        opener = getattr(sys.modules.get(module), "_image_open", opener)
    return opener(io.BytesIO(data))


def _to_mode(image: Any, channels: int) -> Any:
    """``image`` as mode ``L`` (``channels`` 1) or ``RGB`` (3): alpha over white, 16-bit scaled to 8-bit."""
    from PIL import Image

    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):  # 16-bit / 32-bit grey: scale, do not clip
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if values.max(initial=0) > 255 else 255.0
        image = Image.fromarray(np.clip(values * (255.0 / top), 0, 255).astype(np.uint8), mode="L")
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "RGB" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    return image.convert("L" if channels == 1 else "RGB")


def decode_image(data: bytes, path: str, store: int | None, channels: int, interpolation: str = "bilinear") -> np.ndarray:
    """Decode image bytes to a ``channels × S × S`` uint8 array (``S`` = ``store``; ``None`` keeps the size).

    The shorter side is resized to ``store`` with ``interpolation`` and the centre cropped to a square, as
    timm's evaluation transform does before its crop.

    Raises:
        CorruptImageError: the bytes are not a readable image; the message names ``path``.
    """
    from PIL import ImageOps

    try:
        with _open(data) as opened:
            image = _to_mode(ImageOps.exif_transpose(opened), channels)
            if store is not None and image.size != (store, store):
                image = _resize_crop(image, store, interpolation)
            array = np.array(image, dtype=np.uint8)
    except _pillow_errors() as err:
        raise CorruptImageError(f"image '{path}' cannot be decoded ({err}); replace or remove it, or pass "
                                "bad_files='skip' to leave such files out") from None
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def _resize_crop(image: Any, size: int, interpolation: str) -> Any:
    from PIL import Image

    resample = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC,
                "lanczos": Image.LANCZOS, "box": Image.BOX, "hamming": Image.HAMMING}.get(interpolation, Image.BILINEAR)
    w, h = image.size
    scale = size / min(w, h)
    new = (max(size, round(w * scale)), max(size, round(h * scale)))
    image = image.resize(new, resample)
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    return image.crop((left, top, left + size, top + size))


@dataclass
class Survey:
    """What one pass over the files found.

    Attributes:
        paths: the readable image files, in the order given.
        sizes: ``(width, height)`` of each readable file, after EXIF orientation.
        modes: the Pillow modes seen.
        skipped: ``(path, reason)`` of each file left out (``bad_files="skip"``).
    """

    paths: list[str]
    sizes: list[tuple[int, int]]
    modes: set[str] = field(default_factory=set)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def grey(self) -> bool:
        """Whether every readable image is greyscale."""
        return bool(self.modes) and self.modes <= GREY_MODES

    def describe_sizes(self) -> str:
        """``"16–96 px (median 56)"``: the range and median of the shorter sides."""
        sides = sorted(min(s) for s in self.sizes)
        low, high, median = sides[0], sides[-1], self.median_side()
        return f"{low} px" if low == high else f"{low}–{high} px (median {median})"

    def median_side(self) -> int:
        """The median shorter side of the images."""
        return int(np.median([min(s) for s in self.sizes]))


def survey(fs: Any, paths: list[str], bad_files: BadFiles = "error", full_decode: bool = False,
           read: Callable[[str], bytes] | None = None) -> Survey:
    """Open every file of ``paths`` once: its size and mode, and whether it decodes.

    Non-image suffixes and files Pillow cannot read are a ``CorruptImageError`` naming the first
    (``bad_files="error"``) or are left out and listed in ``Survey.skipped`` (``"skip"``). With
    ``full_decode`` every pixel is decoded (a truncated JPEG is found too); otherwise only headers are read
    and Pillow's ``verify`` is run. ``read``: where the bytes of each path come from instead of ``fs`` (images
    held in a dataset's shards: ``paths`` then name them, ``shard, row N``, and carry no suffix to check).
    """
    from PIL import ImageOps

    found = Survey([], [])
    for path in paths:
        reason = None
        if read is None and path.rsplit(".", 1)[-1].lower() not in IMAGE_SUFFIXES:
            reason = f"not an image file ({', '.join(IMAGE_SUFFIXES)})"
        else:
            try:
                data = read(path) if read is not None else fs.cat_file(path)
                with _open(data) as image:
                    mode = image.mode
                    if full_decode:
                        size = ImageOps.exif_transpose(image).size
                    else:
                        image.verify()  # must come straight after open; a second open reads the orientation
                        with _open(data) as again:
                            size = _oriented_size(again)
            except _pillow_errors() as err:
                reason = f"cannot be decoded ({err})"
        if reason is not None:
            if bad_files == "error":
                skip = "or pass bad_files='skip' to leave such files out (they are counted and listed in the run)"
                if reason.startswith("not an image"):
                    raise UnsupportedFormatError(f"'{path}' is {reason}; move it out of the class folder, {skip}")
                raise CorruptImageError(f"image '{path}' {reason}; replace or remove it, {skip}")
            found.skipped.append((path, reason))
            continue
        found.paths.append(path)
        found.sizes.append(size)
        found.modes.add(mode)
    return found


def _oriented_size(image: Any) -> tuple[int, int]:
    """``(width, height)`` after EXIF orientation, read from the header only."""
    w, h = image.size
    try:
        orientation = image.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block: the pixels may still be fine
        orientation = 1
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)
