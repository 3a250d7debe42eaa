"""Images read for an exported model as its card's ``preprocessing`` says, with NumPy and Pillow only.

Two readers, each the semantics of a ``preprocessing["reader"]`` name; the card carries their parameters:

``image`` (an image classifier: ``ImageFolderProcessor`` writes it)
    ``data`` is one image, or a folder: the files of each sub-folder (sorted by name, then by path below it), then
    the folder's own files (sorted); hidden files and ``ignored`` names are left out, a file without one of the
    ``suffixes`` or that Pillow cannot read is an error naming it. Each image is EXIF-oriented, brought to ``mode``
    (``L`` or ``RGB``: 16-bit values scaled to 8 bits by 65535, or by 255 when none exceeds it; palette images
    expanded; transparency composited on white), its shorter side resized to ``resize_shorter_side`` with
    Pillow's ``interpolation`` filter (the longer side rounded, never below it) and the centre square of that side
    kept, then the centre ``size`` × ``size`` cropped, as float32 in [0, 1], channel first. Ids are the files'
    paths below ``data``.

``yolo-images`` (an ultralytics detector: ``YoloDataProcessor`` writes it)
    ``data`` is a YOLO ``data.yaml`` (or its folder: its ``test`` split, else ``val``; reading it needs PyYAML),
    a folder (every file with one of the ``suffixes``, at any depth, hidden ones left out, sorted by path) or one
    image. An image Pillow cannot verify, whose format is not among ``formats``, or with a side under
    ``min_side`` is skipped and counted, as ultralytics skips it. Each is EXIF-oriented RGB (16-bit values: their
    high byte), its long side resized to ``size`` (the other rounded up) with OpenCV's bilinear filter
    (``resize_linear``), then letterboxed: centred on a ``size`` square of grey ``pad_value`` (padding split as
    ultralytics' ``LetterBox`` rounds it), as float32 in [0, 1], channel first. Each image's ``Letterbox`` maps
    boxes back to its pixels. Ids are the files' paths (URIs for remote data).
"""

from __future__ import annotations

import io
import math
import posixpath
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.inference.resize import resize_linear
from twinkle_core.uris import is_local, require_exists

IMAGE_READERS = {"image": ("size", "mode", "resize_shorter_side", "interpolation", "suffixes"),
                 "yolo-images": ("size", "suffixes", "formats", "min_side", "letterbox")}
"""The readers core runs itself, with the card keys each needs (a card without them is read by its plugin)."""

SIXTEEN_BIT = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
_FILTERS = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
"""Pillow's resampling filters by name (``PIL.Image.Resampling`` values)."""


class ImageReadError(TwinkleError):
    """An image the card's reader cannot read (not an image, damaged, or none at all), named with the fix."""


@dataclass(frozen=True)
class Letterbox:
    """How one image became a detector's input, to map boxes back to its pixels.

    Attributes:
        width, height: the image's own size (EXIF-oriented).
        gain: ``(gain_y, gain_x)``: input pixels per image pixel.
        pad: ``(left, top)``: the padding before the image in the input.
    """

    width: int
    height: int
    gain: tuple[float, float]
    pad: tuple[int, int]


def reads_itself(preprocessing: dict[str, Any]) -> bool:
    """Whether core reads the card's data itself (a reader of ``IMAGE_READERS`` with every key it needs)."""
    needed = IMAGE_READERS.get(str(preprocessing.get("reader")))
    return needed is not None and all(preprocessing.get(key) is not None for key in needed)


def open_image(data: bytes, name: str) -> Any:
    """The Pillow image in ``data``, EXIF-oriented (Pillow's own ``Image.open``, even where a library replaced it).

    Raises:
        ImageReadError: Pillow cannot read it; the message names ``name``.
    """
    from PIL import ImageOps

    try:
        with pillow_open()(io.BytesIO(data)) as opened:
            image = ImageOps.exif_transpose(opened)
            image.load()
            return image
    except _pillow_errors() as err:
        raise ImageReadError(f"image '{name}' cannot be decoded ({err}); replace or remove it") from None


def pillow_open() -> Any:
    """Pillow's own ``Image.open``, even where a library replaced it (ultralytics' replacement tries to install a
    plugin, online, whenever a file is not an image)."""
    from PIL import Image

    opener = Image.open
    module = getattr(opener, "__module__", "PIL.Image")
    if module != "PIL.Image":
        opener = getattr(sys.modules.get(module), "_image_open", opener)
    return opener


def _pillow_errors() -> tuple[type[BaseException], ...]:
    from PIL import Image, UnidentifiedImageError

    return UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError, EOFError


def _verified(data: bytes) -> tuple[str, tuple[int, int]] | None:
    """``(format, (width, height) after EXIF orientation)`` of an image Pillow verifies, else None."""
    opener = pillow_open()
    try:
        with opener(io.BytesIO(data)) as image:
            image.verify()
        with opener(io.BytesIO(data)) as image:
            width, height = image.size
            try:
                orientation = image.getexif().get(0x0112, 1)
            except Exception:  # noqa: BLE001 — a damaged EXIF block: the pixels may still be fine
                orientation = 1
            return str(image.format or ""), ((height, width) if orientation in (5, 6, 7, 8) else (width, height))
    except _pillow_errors():
        return None


# ------------------------------------------------------------------------------------------------ classifiers
def classifier_files(data: str, preprocessing: dict[str, Any]
                     ) -> tuple[Any, list[str], list[str], list[tuple[str, str]]]:
    """The filesystem, files and ids of ``data`` as the ``image`` reader lists them (see the module docstring),
    and the files left out: with the card's ``bad_files`` ``"skip"`` (the run's setting), a file of another kind
    or one Pillow cannot read is left out with its reason, as the run's processor leaves it out.

    Raises:
        ImageReadError: no image; with ``bad_files`` ``"error"`` (the default), a file of another kind or one
            Pillow cannot read.
    """
    fs, root = require_exists(data)
    ignored = {str(n).lower() for n in preprocessing.get("ignored") or ()}

    def kept(path: str) -> bool:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        return not name.startswith(".") and name.lower() not in ignored

    if fs.isdir(root):
        folders = sorted(p.rstrip("/") for p in fs.ls(root, detail=False) if fs.isdir(p)
                         and not p.rstrip("/").rsplit("/", 1)[-1].startswith("."))
        paths = [p for f in folders for p in sorted(fs.find(f)) if kept(p)]
        paths += [p for p in sorted(fs.ls(root, detail=False)) if not fs.isdir(p) and kept(p)]
    else:
        paths = [root]
    if not paths:
        raise ImageReadError(f"'{data}' holds no image; give a folder of images or an image file")
    suffixes = tuple(str(s).lower().lstrip(".") for s in preprocessing["suffixes"])
    skip = preprocessing.get("bad_files") == "skip"
    kept_paths, skipped = [], []
    for path in paths:
        if path.rsplit(".", 1)[-1].lower() not in suffixes:
            problem = f"'{path}' is not an image file ({', '.join(suffixes)}); move it out of '{data}'"
        elif _verified(fs.cat_file(path)) is None:
            problem = f"image '{path}' cannot be decoded; replace or remove it"
        else:
            kept_paths.append(path)
            continue
        if not skip:
            raise ImageReadError(problem)
        skipped.append((path, problem))
    if not kept_paths:
        raise ImageReadError(f"'{data}' holds no image that can be read ({len(skipped)} left out)")
    ids = [p[len(root):].lstrip("/") or p.rsplit("/", 1)[-1] for p in kept_paths]
    return fs, kept_paths, ids, skipped


def classifier_input(data: bytes, name: str, preprocessing: dict[str, Any]) -> np.ndarray:
    """One image's ``C × size × size`` uint8 input of the ``image`` reader (see the module docstring)."""
    from PIL import Image

    image = open_image(data, name)
    mode = str(preprocessing["mode"])
    if image.mode in SIXTEEN_BIT:  # 16- or 32-bit grey: scaled, not clipped
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if values.max(initial=0) > 255 else 255.0
        image = Image.fromarray(np.clip(values * (255.0 / top), 0, 255).astype(np.uint8))  # 2-D uint8: L
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "RGB" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    image = image.convert(mode)
    store = int(preprocessing["resize_shorter_side"])
    if image.size != (store, store):
        width, height = image.size
        scale = store / min(width, height)
        new = (max(store, round(width * scale)), max(store, round(height * scale)))
        image = image.resize(new, _FILTERS.get(str(preprocessing["interpolation"]), _FILTERS["bilinear"]))
        left, top = (new[0] - store) // 2, (new[1] - store) // 2
        image = image.crop((left, top, left + store, top + store))
    array = np.array(image, dtype=np.uint8)
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    size = int(preprocessing["size"])
    top, left = (array.shape[1] - size) // 2, (array.shape[2] - size) // 2
    return np.ascontiguousarray(array[:, top:top + size, left:left + size])


def classifier_batches(data: str, preprocessing: dict[str, Any], batch_size: int
                       ) -> tuple[Iterator[tuple[int, np.ndarray]], list[str], dict[str, Any]]:
    """The images at ``data`` as ``(start, float32 batch)`` pairs of the ``image`` reader, their ids and details."""
    fs, paths, ids, skipped = classifier_files(data, preprocessing)

    def batches() -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, len(paths), batch_size):
            chunk = paths[start:start + batch_size]
            pixels = np.stack([classifier_input(fs.cat_file(p), p, preprocessing) for p in chunk])
            yield start, pixels.astype(np.float32) / np.float32(255)

    details: dict[str, Any] = {"images": len(paths)}
    if skipped:  # as the run's processor reports them
        details.update(skipped_files=len(skipped),
                       skipped=[{"path": path, "reason": reason} for path, reason in skipped[:100]])
    return batches(), ids, details


# ------------------------------------------------------------------------------------------------- detectors
def detector_files(data: str, preprocessing: dict[str, Any]
                   ) -> tuple[Any, list[str], list[str], dict[str, Any]]:
    """The filesystem, readable files and ids of ``data`` as the ``yolo-images`` reader lists them (see the
    module docstring), and the details (``images``, ``skipped``, ``split`` for a data.yaml).

    Raises:
        ImageReadError: no image there; TwinkleError: a data.yaml without PyYAML, or without a test or val split.
    """
    fs, path = require_exists(data)
    details: dict[str, Any] = {}
    suffixes = tuple(f".{str(s).lower().lstrip('.')}" for s in preprocessing["suffixes"])
    if path.endswith((".yaml", ".yml")) or (fs.isdir(path) and fs.exists(f"{path.rstrip('/')}/data.yaml")):
        found, details["split"] = yaml_images(data, fs, path, suffixes)
        top = posixpath.commonpath([posixpath.dirname(f) for f in found]) if found else path
    else:
        top = path.rstrip("/") if fs.isdir(path) else path.rsplit("/", 1)[0]
        found = [p for p in (sorted(fs.find(path)) if fs.isdir(path) else [path]) if p.lower().endswith(suffixes)]
    files = [p for p in found if not any(part.startswith(".") for part in p[len(top) + 1:].split("/"))]
    if not files:  # (hidden names are left out as ultralytics' glob leaves them out)
        raise ImageReadError(f"'{data}' holds no image ({', '.join(suffixes)}); point predict at a folder of images, "
                             "one image, or a YOLO dataset")
    formats = {str(f).lower() for f in preprocessing["formats"]}
    smallest = int(preprocessing["min_side"])
    readable = []
    for name in files:
        facts = _verified(fs.cat_file(name))
        if facts is not None and facts[0].lower() in formats and min(facts[1]) >= smallest:
            readable.append(name)
    ids = readable if is_local(fs) else [fs.unstrip_protocol(p) for p in readable]
    details.update({"images": len(readable), "skipped": len(found) - len(readable)})  # hidden ones count too
    return fs, readable, ids, details


def yaml_images(data: str, fs: Any, path: str, suffixes: tuple[str, ...]) -> tuple[list[str], str]:
    """The images of a YOLO data.yaml's ``test`` split (else ``val``), sorted, and the split's name — as
    ultralytics finds them: the split is one entry or a list, each a folder (its images at any depth) or a ``.txt``
    listing one image a line (``./`` lines and other relative ones read from the list's folder), relative to the
    dataset root (``path:``, relative to the YAML's folder; else that folder).

    Raises:
        TwinkleError: PyYAML is missing; the YAML names neither split; an entry or a listed image does not exist.
    """
    try:
        import yaml
    except ImportError:
        raise TwinkleError(f"'{data}' is a YOLO dataset: reading its data.yaml needs PyYAML (pip install pyyaml); "
                           "or point predict at its images folder") from None
    yaml_path = path if path.endswith((".yaml", ".yml")) else f"{path.rstrip('/')}/data.yaml"
    described = yaml.safe_load(fs.cat_file(yaml_path).decode("utf-8-sig")) or {}
    split = next((s for s in ("test", "val") if isinstance(described, dict) and described.get(s)), None)
    if split is None:
        raise TwinkleError(f"'{yaml_path}' has neither a 'test:' nor a 'val:' entry; add 'test: images/test', or "
                           "point predict at a folder of images")
    base = posixpath.dirname(yaml_path)
    root = posixpath.normpath(posixpath.join(base, str(described["path"]))) if described.get("path") else base
    given = described[split]
    entries = [str(e) for e in given] if isinstance(given, list) else [str(given)]
    images: list[str] = []
    for entry in entries:
        found = posixpath.normpath(posixpath.join(root, entry))
        if not fs.exists(found) and len(entries) == 1 and entry.startswith("../"):  # ultralytics' second try
            found = posixpath.normpath(posixpath.join(root, entry[3:]))
        if fs.isdir(found):
            images += [p for p in fs.find(found) if p.lower().endswith(suffixes)]
        elif fs.isfile(found):
            folder = posixpath.dirname(found)
            for number, line in enumerate(fs.cat_file(found).decode("utf-8-sig").strip().splitlines(), 1):
                line = line.strip()
                if not line.lower().endswith(suffixes):
                    continue
                image = posixpath.normpath(posixpath.join(folder, line[2:] if line.startswith("./") else line))
                if not fs.isfile(image):
                    raise TwinkleError(f"'{found}' line {number} names '{image}', which does not exist; list images "
                                       "that exist")
                images.append(image)
        else:
            raise TwinkleError(f"the {split} split '{entry}' of '{yaml_path}' does not exist (looked in {found}; "
                               "splits are relative to its path: entry, else the YAML's folder)")
    return sorted(set(images)), split


def letterbox(image: np.ndarray, size: int, pad_value: int) -> tuple[np.ndarray, Letterbox]:
    """An ``H × W × 3`` uint8 RGB image as a detector's ``3 × size × size`` uint8 input (see the module docstring)
    and its ``Letterbox``."""
    height0, width0 = image.shape[:2]
    ratio = size / max(height0, width0)
    if ratio != 1:  # the long side to size (ultralytics' load_image)
        image = resize_linear(image, min(math.ceil(width0 * ratio), size), min(math.ceil(height0 * ratio), size))
    height, width = image.shape[:2]
    gain = min(size / height, size / width, 1.0)  # ultralytics' LetterBox(scaleup=False)
    new = (max(round(width * gain), 1), max(round(height * gain), 1))
    if (width, height) != new:
        image = resize_linear(image, new[0], new[1])
    across, down = (size - new[0]) / 2, (size - new[1]) / 2
    top, bottom = round(down - 0.1), round(down + 0.1)
    left, right = round(across - 0.1), round(across + 0.1)
    canvas = np.full((new[1] + top + bottom, new[0] + left + right, 3), pad_value, dtype=np.uint8)
    canvas[top:top + new[1], left:left + new[0]] = image
    boxed = Letterbox(width0, height0, (height / height0 * gain, width / width0 * gain), (left, top))
    return np.ascontiguousarray(canvas.transpose(2, 0, 1)), boxed


def detector_input(data: bytes, name: str, preprocessing: dict[str, Any]) -> tuple[np.ndarray, Letterbox]:
    """One image's ``3 × size × size`` uint8 input of the ``yolo-images`` reader and its ``Letterbox``."""
    image = open_image(data, name)
    if image.mode in SIXTEEN_BIT:  # as OpenCV reads 16-bit images: their high byte
        image = _grey8(image)
    rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
    box = preprocessing["letterbox"]
    return letterbox(rgb, int(preprocessing["size"]), int(box.get("pad_value", 114)))


def _grey8(image: Any) -> Any:
    from PIL import Image

    values = np.asarray(image)
    if values.dtype.kind == "f":
        values = np.clip(values, 0, 65535)
    return Image.fromarray((values.astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8))  # 2-D uint8: L


def detector_batches(data: str, preprocessing: dict[str, Any], batch_size: int
                     ) -> tuple[Iterator[tuple[int, np.ndarray, Sequence[Letterbox]]], list[str], dict[str, Any]]:
    """The images at ``data`` as ``(start, float32 batch, letterboxes)`` of the ``yolo-images`` reader, their ids
    and details."""
    fs, paths, ids, details = detector_files(data, preprocessing)

    def batches() -> Iterator[tuple[int, np.ndarray, Sequence[Letterbox]]]:
        for start in range(0, len(paths), batch_size):
            read = [detector_input(fs.cat_file(p), p, preprocessing) for p in paths[start:start + batch_size]]
            pixels = np.stack([array for array, _ in read]).astype(np.float32) / np.float32(255)
            yield start, pixels, [box for _, box in read]

    return batches(), ids, details


__all__ = ["IMAGE_READERS", "ImageReadError", "Letterbox", "classifier_batches", "classifier_files",
           "classifier_input", "detector_batches", "detector_files", "detector_input", "letterbox", "open_image",
           "pillow_open", "reads_itself", "yaml_images"]
