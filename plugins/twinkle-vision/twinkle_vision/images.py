""":class:`ImageFolderProcessor`: image classification data laid out as one folder per class, at any URI.

``root/<class>/<image>`` (split with a seed), or ``root/train/<class>/...`` plus ``root/val/<class>/...``.
Images are decoded with Pillow to uint8 tensors of one size (``image_size``, or the images' own size when they
all share one); grey images give one channel, colour images three. ``use_mmap=True`` decodes every image once
into an index file (cached under the run store, keyed by the data's fingerprint, or built ahead with
``ImageFolderProcessor.build_index``) and memory-maps it, so later epochs and runs skip decoding.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from twinkle_core.data import (
    DataError,
    DataProcessor,
    DataSpec,
    EmptyDataError,
    PreparedData,
    ShardedRows,
    UnsupportedFormatError,
    data_fingerprint,
    filesystem,
    index_header,
    is_index,
    join,
    read_array,
    read_index,
    require_exists,
    split_indices,
    write_index,
)
from twinkle_core.types import Fraction, PositiveInt

IMAGE_SUFFIXES = ("png", "jpg", "jpeg", "bmp", "gif", "webp", "tif", "tiff")


class CorruptImageError(DataError):
    """An image file that Pillow cannot decode."""


def decode_image(data: bytes, path: str, size: int | None, channels: int) -> np.ndarray:
    """Decode image bytes to a ``channels × H × W`` uint8 array, resized to ``size`` × ``size`` if given.

    Raises:
        CorruptImageError: the bytes are not a readable image; the message names ``path``.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image = image.convert("L" if channels == 1 else "RGB")
            if size is not None and image.size != (size, size):
                image = image.resize((size, size), Image.BILINEAR)
            array = np.array(image, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise CorruptImageError(f"image '{path}' cannot be decoded ({err}); replace or remove it") from None
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


class FileImages(Dataset):
    """Decodes each image from storage every time it is read (the simple path)."""

    def __init__(self, fs: Any, paths: list[str], labels: np.ndarray, size: int | None, channels: int) -> None:
        """Read ``paths`` through ``fs``."""
        self.fs, self.paths, self.labels, self.size, self.channels = fs, paths, labels, size, channels

    def __len__(self) -> int:
        """The number of images."""
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Image ``i`` as floats in [0, 1] and its class index."""
        array = decode_image(self.fs.cat_file(self.paths[i]), self.paths[i], self.size, self.channels)
        return torch.from_numpy(array).float().div_(255), torch.tensor(int(self.labels[i]))


class ArrayImages(Dataset):
    """Images already decoded into a (memory-mapped) uint8 array, read at the given rows."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> None:
        """Wrap decoded images; nothing is copied until read."""
        self.images, self.labels, self.rows = images, labels, rows

    def __len__(self) -> int:
        """The number of images."""
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Image ``i`` as floats in [0, 1] and its class index."""
        row = int(self.rows[i])
        return torch.from_numpy(np.array(self.images[row])).float().div_(255), torch.tensor(int(self.labels[row]))


class ImageRow:
    """One ``(image, class)`` sample from a shard of a decoded index (picklable, for loader workers)."""

    def __call__(self, arrays: dict[str, np.ndarray], i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``i`` of the shard as floats in [0, 1] and its class index."""
        return torch.from_numpy(np.array(arrays["images"][i])).float().div_(255), torch.tensor(int(arrays["labels"][i]))


class _Rows(Dataset):
    def __init__(self, base: Dataset, rows: np.ndarray) -> None:
        self.base, self.rows = base, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Any:
        return self.base[int(self.rows[i])]


class ImageFolderProcessor(DataProcessor):
    """One folder per class (ImageFolder layout) at any fsspec URI; see the module docstring."""

    task = "image_classification"
    formats = ()

    def __init__(self, image_size: PositiveInt | None = None, val_fraction: Fraction = 0.2, use_mmap: bool = False,
                 channels: int | None = None, shard_rows: PositiveInt = 1024) -> None:
        """Configure the processor.

        Args:
            image_size: resize every image to this square size (default: keep the images' common size).
            val_fraction: the share held out for validation when there is no ``val/`` folder.
            use_mmap: decode once into a memory-mapped index (see the module docstring).
            channels: 1 or 3 (default: 1 when every image is greyscale, else 3).
            shard_rows: images per shard when the plan streams the data in shards (larger than memory).
        """
        super().__init__()
        if channels not in (None, 1, 3):
            raise DataError(f"channels must be 1 or 3, got {channels}")
        self.image_size, self.val_fraction, self.use_mmap, self.channels = image_size, val_fraction, use_mmap, channels
        self.shard_rows = shard_rows

    # ------------------------------------------------------------------ listing
    def scan(self, uri: str) -> dict[str, Any]:
        """Classes, files and labels of the tree at ``uri`` (and whether it has train/val folders).

        Raises:
            DataNotFoundError, EmptyDataError, UnsupportedFormatError: naming the folder or file.
        """
        fs, root = require_exists(uri)
        if not fs.isdir(root):
            raise DataError(f"'{uri}' is a file; image classification data is a folder with one folder per class")
        top = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False) if fs.isdir(p))
        splits = ["train", "val"] if {"train", "val"} <= set(top) else [""]
        files: dict[str, list[tuple[str, str]]] = {}
        for split in splits:
            base = join(root, split) if split else root
            classes = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base, detail=False) if fs.isdir(p))
            if not classes:
                raise EmptyDataError(f"'{uri}' has no class folders; lay images out as {uri}/<class>/<image>")
            for name in classes:
                paths = sorted(p for p in fs.find(join(base, name)))
                bad = [p for p in paths if p.rsplit(".", 1)[-1].lower() not in IMAGE_SUFFIXES]
                if bad:
                    raise UnsupportedFormatError(
                        f"'{bad[0]}' is not an image ({', '.join(IMAGE_SUFFIXES)}); move it out of the class folder"
                    )
                if not paths:
                    raise EmptyDataError(f"class folder '{join(base, name)}' is empty; add images or remove it")
                files.setdefault(split, []).extend((p, name) for p in paths)
        classes = sorted({c for entries in files.values() for _, c in entries})
        if len(classes) < 2:
            raise DataError(f"'{uri}' has one class only ({classes[0]}); classification needs two or more")
        if splits == ["train", "val"]:
            unseen = sorted({c for _, c in files.get("val", [])} - {c for _, c in files.get("train", [])})
            if unseen:
                raise DataError(
                    f"'{uri}': class(es) {', '.join(repr(c) for c in unseen)} are in val/ but not in train/; the model "
                    "could never predict them. Add training images for them or remove them from val/"
                )
        return {"fs": fs, "root": root, "splits": files, "classes": classes}

    # --------------------------------------------------------------- decoding
    def _shape(self, fs: Any, paths: list[str]) -> tuple[int, int | None]:
        from PIL import Image

        modes, sizes = set(), set()
        for path in paths:
            try:
                with Image.open(io.BytesIO(fs.cat_file(path))) as image:
                    modes.add(image.mode)
                    sizes.add(image.size)
            except Exception:
                decode_image(fs.cat_file(path), path, None, 3)  # raises CorruptImageError naming it
        channels = self.channels or (1 if modes <= {"L", "1", "I;16", "I"} else 3)
        if self.image_size is None and len(sizes) > 1:
            raise DataError(f"images have {len(sizes)} different sizes (e.g. {sorted(sizes)[:3]}); pass image_size=N")
        size = self.image_size
        return channels, size if size is not None else None

    def write_index(self, src: str, dst: str) -> str:
        """Decode every image of ``src`` once into the index file ``dst``."""
        tree = self.scan(src)
        entries = [(p, c, s) for s, items in tree["splits"].items() for p, c in items]
        channels, size = self._shape(tree["fs"], [p for p, _, _ in entries])
        lookup = {c: i for i, c in enumerate(tree["classes"])}
        images = np.stack([decode_image(tree["fs"].cat_file(p), p, size, channels) for p, _, _ in entries])
        labels = np.array([lookup[c] for _, c, _ in entries], dtype=np.int64)
        split = np.array([{"": 0, "train": 1, "val": 2}[s] for _, _, s in entries], dtype=np.int8)
        meta = {"task": self.task, "classes": tree["classes"], "fingerprint": data_fingerprint(src), "source": src}
        return write_index(dst, {"images": images, "labels": labels, "split": split}, meta)

    def _cached_index(self, uri: str, fingerprint: str) -> str:
        url = self.cache_dir("images", f"{fingerprint.removeprefix('md5:')}-{self.image_size}-"
                                                      f"{self.channels}.idx")
        fs, path = filesystem(url)
        if not fs.exists(path):
            self.write_index(uri, url)
        return url

    # ------------------------------------------------------------ preparation
    def prepare(self, uri: str, seed: int = 0) -> PreparedData:
        """List, validate, decode (or memory-map) and split the images."""
        fs, path = require_exists(uri)
        indexed = is_index(uri)
        if self.sharded:  # larger than memory: decoded once into an index, then streamed in shards
            return self._prepare_sharded(uri, seed, indexed)
        if indexed or self.use_mmap:
            fingerprint = read_index(uri, mmap=True)[1]["fingerprint"] if indexed else data_fingerprint(uri)
            index = uri if indexed else self._cached_index(uri, fingerprint)
            arrays, meta = read_index(index, mmap=True)
            images, labels, split = arrays["images"], np.asarray(arrays["labels"]), np.asarray(arrays["split"])
            classes, channels = meta["classes"], int(images.shape[1])
            train_rows, val_rows = self._split(split, labels, seed)
            train: Dataset = ArrayImages(images, labels, train_rows)
            val: Dataset = ArrayImages(images, labels, val_rows)
            sample_source = images
            input_shape = tuple(int(v) for v in images.shape[1:])
            size_bytes = int(fs.size(path)) if indexed else int(images.nbytes)
        else:
            tree = self.scan(uri)
            entries = [(p, c, s) for s, items in tree["splits"].items() for p, c in items]
            channels, size = self._shape(tree["fs"], [p for p, _, _ in entries])
            classes = tree["classes"]
            lookup = {c: i for i, c in enumerate(classes)}
            labels = np.array([lookup[c] for _, c, _ in entries], dtype=np.int64)
            split = np.array([{"": 0, "train": 1, "val": 2}[s] for _, _, s in entries], dtype=np.int8)
            train_rows, val_rows = self._split(split, labels, seed)
            files = FileImages(tree["fs"], [p for p, _, _ in entries], labels, size, channels)
            train, val = _Rows(files, train_rows), _Rows(files, val_rows)
            fingerprint = data_fingerprint(uri)
            first = files[0][0]
            input_shape = tuple(int(v) for v in first.shape)
            sample_source = None
            size_bytes = int(sum(tree["fs"].size(p) for p, _, _ in entries))
        mean, std = self._statistics(train, sample_source, train_rows)
        spec = DataSpec("image_classification", input_shape, num_classes=len(classes), class_names=tuple(classes),
                        extra={"mean": mean, "std": std})
        details = {"images": int(len(labels)), "train_images": int(len(train_rows)), "val_images": int(len(val_rows)),
                   "index": indexed, "channels": channels}
        return PreparedData(train, val, spec, fingerprint, uri, size_bytes, details)

    def _prepare_sharded(self, uri: str, seed: int, indexed: bool) -> PreparedData:
        fingerprint = index_header(uri)[0]["meta"]["fingerprint"] if indexed else data_fingerprint(uri)
        index = uri if indexed else self._cached_index(uri, fingerprint)
        header, _ = index_header(index)
        meta = header["meta"]
        labels, split = read_array(index, "labels"), read_array(index, "split")
        train_rows, val_rows = self._split(split, labels, seed)
        train = ShardedRows(index, train_rows, ("images", "labels"), ImageRow(), seed=seed, shuffle=True, pad=True,
                            shard_rows=self.shard_rows)
        val = ShardedRows(index, val_rows, ("images", "labels"), ImageRow(), seed=seed, shuffle=False, pad=False,
                          shard_rows=self.shard_rows)
        sample = train.sample_arrays(2000)["images"]
        mean, std = self._statistics(train, sample, np.arange(len(sample)))
        shape = tuple(int(v) for v in header["arrays"]["images"]["shape"][1:])
        classes = meta["classes"]
        spec = DataSpec("image_classification", shape, num_classes=len(classes), class_names=tuple(classes),
                        extra={"mean": mean, "std": std})
        fs, path = filesystem(index)
        details = {"images": int(len(labels)), "train_images": int(len(train_rows)), "val_images": int(len(val_rows)),
                   "index": indexed, "channels": shape[0], "sharded": True, "shards": len(train.shards)}
        return PreparedData(train, val, spec, fingerprint, uri, int(fs.size(path)), details)

    def _split(self, split: np.ndarray, labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        if (split == 1).any():
            return np.flatnonzero(split == 1), np.flatnonzero(split == 2)
        return split_indices(len(labels), self.val_fraction, seed, labels)

    @staticmethod
    def _statistics(train: Dataset, images: np.ndarray | None, rows: np.ndarray) -> tuple[list[float], list[float]]:
        """Per-channel mean and standard deviation of (up to 2,000) training images, in [0, 1] units."""
        picked = rows[np.linspace(0, len(rows) - 1, min(len(rows), 2000)).astype(int)]
        if images is not None:
            sample = np.asarray(images[np.sort(picked)], dtype=np.float64) / 255
        else:
            positions = np.linspace(0, len(train) - 1, min(len(train), 2000)).astype(int)
            sample = np.stack([train[int(i)][0].numpy() for i in positions]).astype(np.float64)
        mean = sample.mean(axis=(0, 2, 3))
        std = sample.std(axis=(0, 2, 3))
        return mean.tolist(), np.where(std > 1e-6, std, 1.0).tolist()
