"""``ImageFolderProcessor``: image classification data laid out as one folder per class, at any URI.

``root/<class>/<image>`` (split with a seed; nested folders below a class are fine), or ``root/train/<class>/``
plus ``root/val/<class>/`` as ImageNet ships them. Images come as they are found — any size, mode (grey, RGB,
RGBA, palette, 16-bit) and Pillow format, with EXIF orientation — see ``twinkle_vision.imagefiles``.

The input size comes from ``image_size``, else from the model's data config and the images' resolution
(``twinkle_vision.transforms.choose_size``; the plan says why). Every image is stored square at timm's
pre-crop size; training applies timm's transforms (random-resized-crop, flips, colour jitter or a
RandAugment-style ``auto_augment`` policy), validation the centre crop — a whole batch at once where the
transforms allow (``TrainTransform.batch``): the batch's stored images gathered by one index into a uint8 tensor,
then cropped, resampled and jittered as tensors, no Python per image. ``use_mmap=True`` decodes every
image once into an index file (cached under the run store, keyed by the data's fingerprint and the chosen
layout, or built ahead with ``ImageFolderProcessor.build_index``) and memory-maps it; by default
(``use_mmap=None``) that happens whenever the decoded images take at most ``DECODE_ONCE_BYTES`` (and an eighth of
the host's memory), so that no epoch after the first decodes a file again. Files that cannot be
decoded stop the run naming the file (``bad_files="error"``) or are left out, counted and listed in the run
(``bad_files="skip"``).

A Hugging Face dataset folder (``save_to_disk``'s or the Hub's Parquet layout) with an ``Image`` column and a
``ClassLabel`` (or text) label column is read the same way: its train split's images — encoded bytes in its
shards — decoded once into the cached index, classes by name; an evaluation reads its test split (else
validation, else train). Each image is named ``<shard>, row N`` in errors.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Callable

import numpy as np
import torch
from annotated_types import Interval, MaxLen, MinLen
from torch.utils.data import Dataset

from twinkle_core.data import (
    DataError,
    DataSpec,
    EmptyDataError,
    IndexedProcessor,
    ModelInput,
    PrepareContext,
    PreparedData,
    Samples,
    data_fingerprint,
    filesystem,
    index_header,
    is_hf_dataset,
    is_index,
    join,
    open_hf_dataset,
    read_array,
    read_index,
    require_exists,
    split_indices,
    write_index,
)
from twinkle_core.planning import Decision
from twinkle_core.types import Fraction, NonNegativeFloat, PositiveInt
from twinkle_vision.imagefiles import IMAGE_SUFFIXES, BadFiles, CorruptImageError, Survey, decode_image, survey
from twinkle_vision.transforms import EvalTransform, TrainTransform, choose_size, store_side

__all__ = ["CorruptImageError", "ImageFolderProcessor"]

Chance = Annotated[float, Interval(ge=0, le=1)]
Range = Annotated[tuple[Annotated[float, Interval(gt=0, le=10)], ...], MinLen(2), MaxLen(2)]
IGNORED_FILES = ("thumbs.db", "desktop.ini")  # operating-system litter, like names starting with "."
SPLIT_CODES = {"": 0, "train": 1, "val": 2}
DECODE_ONCE_BYTES = 2 * 2**30
"""With ``use_mmap=None``, images decoded to at most this many bytes (and an eighth of the host's memory) are
decoded once into a cached index instead of from their files in every epoch."""


def _batch_of(transform: Any, stored: np.ndarray, labels: np.ndarray) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(image, class)`` samples of a whole batch of ``stored`` uint8 images, transformed at once by
    ``transform.batch``."""
    images = transform.batch(torch.from_numpy(np.ascontiguousarray(stored)))
    return list(zip(images.unbind(0), torch.as_tensor(labels, dtype=torch.int64).unbind(0)))


class FileImages(Dataset):
    """Decodes each image from storage every time it is read (the simple path)."""

    def __init__(self, fs: Any, paths: list[str], labels: np.ndarray, rows: np.ndarray, layout: dict[str, Any],
                 transform: Callable[[np.ndarray], torch.Tensor]) -> None:
        """Read the files ``paths[rows]`` through ``fs``, stored as ``layout`` says, then ``transform``."""
        self.fs, self.paths, self.labels, self.rows = fs, paths, labels, rows
        self.layout, self.transform = layout, transform

    def __len__(self) -> int:
        """The number of images."""
        return len(self.rows)

    def stored(self, i: int) -> np.ndarray:
        """Image ``i`` decoded to the stored square (before its transform)."""
        path = self.paths[int(self.rows[i])]
        return decode_image(self.fs.cat_file(path), path, self.layout["store"], self.layout["channels"],
                            self.layout["interpolation"])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Image ``i`` as floats in [0, 1] and its class index."""
        return self.transform(self.stored(i)), torch.tensor(int(self.labels[int(self.rows[i])]))

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A batch (what a ``DataLoader`` asks for): decoded one by one, transformed together where the transform
        can (``transform.batch``)."""
        if getattr(self.transform, "batch", None) is None:
            return [self[i] for i in indices]
        rows = self.rows[np.asarray(indices, dtype=np.int64)]
        return _batch_of(self.transform, np.stack([self.stored(i) for i in indices]), self.labels[rows])


class _Inputs(Dataset):
    """The images of a dataset without their labels (``(image,)`` items: unlabelled samples)."""

    def __init__(self, images: Dataset) -> None:
        """Wrap ``images``."""
        self.images = images

    def __len__(self) -> int:
        """The number of images."""
        return len(self.images)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[torch.Tensor]:
        """Image ``i`` alone."""
        return (self.images[i][0],)


class _EncodedImages(Dataset):
    """Encoded images held in memory, decoded as files are (``(image,)`` items: unlabelled samples)."""

    def __init__(self, encoded: list[bytes], layout: dict[str, Any],
                 transform: Callable[[np.ndarray], torch.Tensor]) -> None:
        """Decode ``encoded[i]`` stored as ``layout`` says, then ``transform``."""
        self.encoded, self.layout, self.transform = encoded, layout, transform

    def __len__(self) -> int:
        """The number of images."""
        return len(self.encoded)

    def __getitem__(self, i: int) -> tuple[torch.Tensor]:
        """Image ``i`` as floats in [0, 1]."""
        array = decode_image(self.encoded[i], f"item {i}", self.layout["store"], self.layout["channels"],
                             self.layout["interpolation"])
        return (self.transform(array),)


class ArrayImages(Dataset):
    """Images already decoded into a (memory-mapped) uint8 array, read at the given rows."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, rows: np.ndarray,
                 transform: Callable[[np.ndarray], torch.Tensor]) -> None:
        """Wrap decoded images; nothing is copied until read."""
        self.images, self.labels, self.rows, self.transform = images, labels, rows, transform

    def __len__(self) -> int:
        """The number of images."""
        return len(self.rows)

    def stored(self, i: int) -> np.ndarray:
        """Image ``i`` as stored (before its transform)."""
        return np.asarray(self.images[int(self.rows[i])])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Image ``i`` as floats in [0, 1] and its class index."""
        return self.transform(self.stored(i)), torch.tensor(int(self.labels[int(self.rows[i])]))

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A batch (what a ``DataLoader`` asks for): its rows gathered by one index and transformed together where
        the transform can (``transform.batch``)."""
        if getattr(self.transform, "batch", None) is None:
            return [self[i] for i in indices]
        rows = self.rows[np.asarray(indices, dtype=np.int64)]
        return _batch_of(self.transform, self.images[rows], self.labels[rows])


class ImageRow:
    """One ``(image, class)`` sample from a shard of a decoded index (picklable, for loader workers)."""

    def __init__(self, transform: Callable[[np.ndarray], torch.Tensor]) -> None:
        """Apply ``transform`` to each stored image."""
        self.transform = transform

    def __call__(self, arrays: dict[str, np.ndarray], i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``i`` of the shard as floats in [0, 1] and its class index."""
        return self.transform(np.asarray(arrays["images"][i])), torch.tensor(int(arrays["labels"][i]))


class ImageFolderProcessor(IndexedProcessor):
    """One folder per class (ImageFolder layout) at any fsspec URI; see the module docstring."""

    task = "image_classification"
    formats = ()
    index_kind = "images"
    row_arrays = ("images", "labels")

    def __init__(self, image_size: PositiveInt | None = None, val_fraction: Fraction = 0.2, use_mmap: bool | None = None,
                 channels: int | None = None, shard_rows: PositiveInt = 1024, bad_files: BadFiles = "error",
                 augment: bool = True, crop_scale: Range = (0.7, 1.0), crop_ratio: Range = (0.75, 4 / 3),
                 hflip: Chance = 0.0, vflip: Chance = 0.0, color_jitter: NonNegativeFloat = 0.4,
                 auto_augment: str | None = None) -> None:
        """Configure the processor.

        Args:
            image_size: the network's input side (default: chosen from the model and the images; see
                ``twinkle_vision.transforms.choose_size``).
            val_fraction: the share held out for validation when there is no ``val/`` folder.
            use_mmap: decode once into a memory-mapped index (see the module docstring); ``None`` (default):
                when the decoded images take at most ``DECODE_ONCE_BYTES``; ``False``: decode from the files in
                every epoch.
            channels: 1 or 3 (default: 1 when every image is greyscale, else 3).
            shard_rows: images per shard when the plan streams the data in shards (larger than memory).
            bad_files: ``"error"`` (the first undecodable file stops the run, named) or ``"skip"`` (left out,
                counted and listed in the run's data record).
            augment: apply the training transforms below (``False``: the centre crop, as in validation).
            crop_scale: random-resized-crop's range of the image area kept (Ultralytics' default; timm
                trains ImageNet with ``(0.08, 1.0)``).
            crop_ratio: random-resized-crop's aspect-ratio range.
            hflip: horizontal-flip probability (off by default: flips change digits, text and signs; timm and
                Ultralytics use 0.5 for natural photos).
            vflip: vertical-flip probability.
            color_jitter: timm's colour-jitter strength (0: none).
            auto_augment: a timm augmentation policy (``"rand-m9-mstd0.5"`` for RandAugment, ``"augmix-m5"``,
                ``"original"`` for AutoAugment); it replaces the colour jitter.
        """
        super().__init__()
        if channels not in (None, 1, 3):
            raise DataError(f"channels must be 1 or 3, got {channels}")
        if crop_scale[0] > crop_scale[1] or crop_scale[1] > 1:
            raise DataError(f"crop_scale={tuple(crop_scale)} must be (low, high) with low <= high <= 1")
        if crop_ratio[0] > crop_ratio[1]:
            raise DataError(f"crop_ratio={tuple(crop_ratio)} must be (low, high) with low <= high")
        self.image_size, self.val_fraction, self.use_mmap, self.channels = image_size, val_fraction, use_mmap, channels
        self.shard_rows, self.bad_files, self.augment = shard_rows, bad_files, augment
        self.crop_scale, self.crop_ratio = tuple(crop_scale), tuple(crop_ratio)
        self.hflip, self.vflip, self.color_jitter, self.auto_augment = hflip, vflip, color_jitter, auto_augment
        if auto_augment is not None:  # a policy timm does not know is refused now, not in the first batch
            TrainTransform(8, 3, self.crop_scale, self.crop_ratio, hflip, vflip, color_jitter, auto_augment,
                           "bilinear")

    # ------------------------------------------------------------------ listing
    def scan(self, uri: str) -> dict[str, Any]:
        """Classes, files and labels of the tree at ``uri`` (and whether it has train/val folders).

        Hidden files (``.DS_Store``) and operating-system litter (``Thumbs.db``) are ignored.

        Raises:
            DataNotFoundError, EmptyDataError, DataError: naming the folder.
        """
        fs, root = require_exists(uri)
        if not fs.isdir(root):
            raise DataError(f"'{uri}' is a file; image classification data is a folder with one folder per class")
        top = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False) if fs.isdir(p))
        splits = ["train", "val"] if {"train", "val"} <= set(top) else [""]
        files: dict[str, list[tuple[str, str]]] = {}
        for split in splits:
            base = join(root, split) if split else root
            classes = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base, detail=False) if fs.isdir(p)
                             and not p.rstrip("/").rsplit("/", 1)[-1].startswith("."))
            if not classes:
                raise EmptyDataError(f"'{uri}' has no class folders; lay images out as {uri}/<class>/<image>")
            for name in classes:
                paths = sorted(p for p in fs.find(join(base, name)) if _kept(p))
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

    # ------------------------------------------------------------------ layout
    def _survey(self, uri: str, full_decode: bool) -> tuple[dict[str, Any], list[tuple[str, str, str]], Survey]:
        """Scan and survey the tree: its entries ``(path, class, split)`` that decode, and the survey."""
        tree = self.scan(uri)
        entries = [(p, c, s) for s, items in tree["splits"].items() for p, c in items]
        found = survey(tree["fs"], [p for p, _, _ in entries], self.bad_files, full_decode)
        if found.skipped:
            good = set(found.paths)
            entries = [e for e in entries if e[0] in good]
            listed = {(split, c) for split, items in tree["splits"].items() for _, c in items}
            emptied = sorted(listed - {(split, c) for _, c, split in entries})
            if emptied:
                split, name = emptied[0]
                folder = join(tree["root"], split, name) if split else join(tree["root"], name)
                raise EmptyDataError(f"class folder '{folder}' has no image that decodes (every file was skipped); "
                                     "fix or remove it")
        return tree, entries, found

    def _layout(self, found: Survey, model: ModelInput | None) -> tuple[dict[str, Any], list[Decision]]:
        """The input size, stored side, channels and interpolation for these images (for ``model``'s input), and
        the decisions."""
        decision = choose_size(self.image_size, model, found.median_side(), found.describe_sizes())
        size = int(decision.value)
        crop_pct = model.crop_pct if model is not None else 1.0
        layout = {"size": size, "store": store_side(size, crop_pct),
                  "channels": self.channels or (1 if found.grey else 3),
                  "interpolation": model.interpolation if model is not None else "bilinear",
                  "crop_pct": crop_pct, "input_size_reason": decision.reason}
        decisions = [decision]
        if found.skipped:
            decisions.append(Decision("bad_files", len(found.skipped),
                                      f"skipped {len(found.skipped)} file(s) that cannot be read, e.g. "
                                      f"'{found.skipped[0][0]}' ({found.skipped[0][1]}); listed in the run's data"))
        return layout, decisions

    def _layout_key(self, model: ModelInput | None) -> str:
        """What the stored layout depends on besides the data (the cache key of a decoded index)."""
        key = json.dumps([self.image_size, self.channels, self.bad_files, repr(model)])
        return hashlib.md5(key.encode()).hexdigest()[:12]

    # --------------------------------------------------------------- decoding
    def hf_images(self, uri: str, evaluation: bool = False) -> tuple[list[str], list[tuple[str, str, str]],
                                                                       dict[str, bytes]]:
        """A Hugging Face dataset folder's images: its classes (sorted by name, as class folders are), each image
        ``(where, class, "")`` of its train split (``evaluation``: its test split, else validation, else train)
        and their encoded bytes by ``where`` (``<shard>, row N``).

        Raises:
            DataError: no ``Image`` column, no label column, an image row without its bytes, one class only.
        """
        dataset = open_hf_dataset(uri)
        split = dataset.evaluation_split() if evaluation else dataset.split()
        images = dataset.image_columns()
        if not images:
            raise DataError(f"'{uri}' has no Image column (datasets' Image feature); image classification reads one "
                            f"(its features: {', '.join(dataset.features) or 'none described'})")
        labels = [c for c in dataset.features if dataset.class_names(c)] or \
            [c for c in ("label", "labels") if c in dataset.features]
        if not labels:
            raise DataError(f"'{uri}' has no label column (a ClassLabel, or one named label); its features: "
                            f"{', '.join(dataset.features)}")
        column, names = labels[0], dataset.class_names(labels[0])
        entries, blobs = [], {}
        for values, shard, number in dataset.rows(split):
            where = f"{shard.rsplit('/', 1)[-1]}, row {number}"
            image, label = values.get(images[0]), values.get(column)
            data = image.get("bytes") if isinstance(image, dict) else None
            if not data:
                raise DataError(f"'{uri}' ({where}): the image holds no bytes (only a path); save the dataset with "
                                "its images embedded (datasets' cast_column(..., Image()) then save_to_disk)")
            if label is None:
                raise DataError(f"'{uri}' ({where}): no '{column}'; give every image its class")
            name = names[int(label)] if names else str(label)
            entries.append((where, name, ""))
            blobs[where] = bytes(data)
        if not entries:
            raise EmptyDataError(f"split '{split}' of '{uri}' holds no image")
        classes = sorted({c for _, c, _ in entries})
        if len(classes) < 2 and not evaluation:
            raise DataError(f"'{uri}' has one class only ({classes[0]}); classification needs two or more")
        return classes, entries, blobs

    def write_index(self, src: str, dst: str, model: ModelInput | None = None) -> str:
        """Decode every image of ``src`` once (every pixel checked) into the index file ``dst``, laid out for
        ``model``'s input (default: the 0.2-style ``model_input`` attribute, else from the images alone); ``src``
        may be a Hugging Face dataset folder (``hf_images``)."""
        if is_hf_dataset(src):
            classes, entries, blobs = self.hf_images(src)
            found = survey(None, [w for w, _, _ in entries], self.bad_files, True, read=blobs.__getitem__)
            good = set(found.paths)
            entries = [e for e in entries if e[0] in good]
            tree: dict[str, Any] = {"classes": classes}

            def read(where: str) -> bytes:
                return blobs[where]
        else:
            tree, entries, found = self._survey(src, full_decode=True)

            def read(where: str) -> bytes:
                return tree["fs"].cat_file(where)
        layout, decisions = self._layout(found, model if model is not None else self.model_input)
        lookup = {c: i for i, c in enumerate(tree["classes"])}
        images = np.stack([decode_image(read(p), p, layout["store"], layout["channels"], layout["interpolation"])
                           for p, _, _ in entries])
        labels = np.array([lookup[c] for _, c, _ in entries], dtype=np.int64)
        split = np.array([SPLIT_CODES[s] for _, _, s in entries], dtype=np.int8)
        meta = {"task": self.task, "classes": tree["classes"], "fingerprint": data_fingerprint(src), "source": src,
                "layout": layout, "sizes": found.describe_sizes(), "skipped": found.skipped,
                "decisions": [vars(d) for d in decisions]}
        return write_index(dst, {"images": images, "labels": labels, "split": split}, meta)

    def _index_name(self, fingerprint: str, model: ModelInput | None) -> str:
        """The cached index's file name: the data's fingerprint and the layout's key."""
        return f"{fingerprint.removeprefix('md5:')}-{self._layout_key(model)}.idx"

    def _cached_index(self, uri: str, fingerprint: str, context: PrepareContext) -> str:
        model = context.model_input
        return self.cached_index(context, self._index_name(fingerprint, model),
                                 lambda url: self.write_index(uri, url, model))

    def _from_index(self, meta: dict[str, Any], images_shape: tuple[int, ...], uri: str) -> tuple[dict[str, Any], list[Decision]]:
        """The layout an index file was written with (an index built before layouts were stored: its shape)."""
        layout = meta.get("layout") or {"size": int(images_shape[-1]), "store": int(images_shape[-1]),
                                        "channels": int(images_shape[1]), "interpolation": "bilinear", "crop_pct": 1.0,
                                        "input_size_reason": "the index file's image size"}
        if self.image_size is not None and self.image_size != layout["size"]:
            raise DataError(f"index '{uri}' holds images for input size {layout['size']}, not image_size="
                            f"{self.image_size}; rebuild it with ImageFolderProcessor.build_index(..., "
                            f"image_size={self.image_size}) or drop image_size")
        decisions = [Decision(**d) for d in meta.get("decisions", [])] or \
            [Decision("input_size", layout["size"], layout["input_size_reason"])]
        return layout, decisions

    # ------------------------------------------------------------ preparation
    def _transforms(self, layout: dict[str, Any]) -> tuple[Callable[[np.ndarray], torch.Tensor], EvalTransform]:
        """The training and validation transforms for ``layout``."""
        evaluation = EvalTransform(layout["size"])
        if not self.augment:
            return evaluation, evaluation
        return TrainTransform(layout["size"], layout["channels"], self.crop_scale, self.crop_ratio, self.hflip,
                              self.vflip, self.color_jitter, self.auto_augment, layout["interpolation"]), evaluation

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """List, validate, decode (or memory-map) and split the images."""
        context = self.context(context)
        seed = context.seed
        fs, path = require_exists(uri)
        indexed = is_index(uri)
        if context.sharded:  # larger than memory: decoded once into an index, then streamed in shards
            return self._prepare_sharded(uri, context, indexed)
        fingerprint = index_header(uri)[0]["meta"]["fingerprint"] if indexed else data_fingerprint(uri)
        if is_hf_dataset(uri):  # the images are bytes in the shards: decoded once into the cached index
            decode_once: Decision | None = Decision(
                "image_path", "decoded index", "a Hugging Face dataset's images are encoded in its shards: decoded "
                "once into an index cached in the store, batches gathered from it by indexing")
        else:
            decode_once = None if indexed or self.use_mmap is not None else self._decode_once(uri, fingerprint,
                                                                                               context)
        if indexed or self.use_mmap or decode_once is not None:
            index = uri if indexed else self._cached_index(uri, fingerprint, context)
            arrays, meta = read_index(index, mmap=True)
            images, labels, split = arrays["images"], np.asarray(arrays["labels"]), np.asarray(arrays["split"])
            layout, decisions = self._from_index(meta, images.shape, index)
            if decode_once is not None:
                decisions = [*decisions, decode_once]
            classes, skipped, described = meta["classes"], meta.get("skipped", []), meta.get("sizes", "")
            train_rows, val_rows = self._split(split, labels, seed)
            fit, evaluation = self._transforms(layout)
            train: Dataset = ArrayImages(images, labels, train_rows, fit)
            val: Dataset = ArrayImages(images, labels, val_rows, evaluation)
            size_bytes = int(fs.size(path)) if indexed else int(images.nbytes)
        else:
            tree, entries, found = self._survey(uri, full_decode=self.bad_files == "skip")
            layout, decisions = self._layout(found, context.model_input)
            classes, skipped, described = tree["classes"], found.skipped, found.describe_sizes()
            lookup = {c: i for i, c in enumerate(classes)}
            labels = np.array([lookup[c] for _, c, _ in entries], dtype=np.int64)
            split = np.array([SPLIT_CODES[s] for _, _, s in entries], dtype=np.int8)
            train_rows, val_rows = self._split(split, labels, seed)
            paths = [p for p, _, _ in entries]
            fit, evaluation = self._transforms(layout)
            train = FileImages(tree["fs"], paths, labels, train_rows, layout, fit)
            val = FileImages(tree["fs"], paths, labels, val_rows, layout, evaluation)
            size_bytes = int(sum(tree["fs"].size(p) for p in paths))
        view = ArrayImages(images, labels, train_rows, evaluation) if isinstance(train, ArrayImages) else \
            FileImages(train.fs, train.paths, labels, train_rows, layout, evaluation)
        mean, std = self._statistics(view)
        spec = self._spec(layout, classes, mean, std)
        details = {"images": int(len(labels)), "train_images": int(len(train_rows)), "val_images": int(len(val_rows)),
                   "index": indexed, "channels": layout["channels"], "input_size": layout["size"],
                   "image_sizes": described, **_skipped_details(skipped)}
        return PreparedData(train, val, spec, fingerprint, uri, size_bytes, details, decisions=decisions)

    def _decode_once(self, uri: str, fingerprint: str, context: PrepareContext) -> Decision | None:
        """With ``use_mmap=None``: the decision to decode every image once into a cached index, when the decoded
        images are small enough (``DECODE_ONCE_BYTES``, an eighth of the host's memory) or an earlier run of the
        same data and layout decoded them already; ``None`` to read the files in every epoch."""
        import os

        cached = context.cache_dir(self.index_kind, self._index_name(fingerprint, context.model_input))
        fs, path = filesystem(cached)
        if fs.exists(path):
            return Decision("image_path", "decoded index", "decoded once by an earlier run of the same data and input "
                                                           "into an index cached in the store: batches gathered from "
                                                           "it by indexing (use_mmap=False reads the files every epoch)")
        tree, entries, found = self._survey(uri, full_decode=False)
        layout, _ = self._layout(found, context.model_input)
        decoded = len(entries) * int(layout["channels"]) * int(layout["store"]) ** 2
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        limit = min(DECODE_ONCE_BYTES, memory // 8) if memory else DECODE_ONCE_BYTES
        if decoded > limit:
            return None
        return Decision("image_path", "decoded index",
                        f"{len(entries)} images decode to {decoded / 2**20:.1f} MiB (≤ {limit / 2**20:.0f} MiB): decoded "
                        "once into an index cached in the store, batches gathered from it by indexing (use_mmap=False "
                        "reads the files every epoch)")

    def _prepare_sharded(self, uri: str, context: PrepareContext, indexed: bool) -> PreparedData:
        seed = context.seed
        fingerprint = index_header(uri)[0]["meta"]["fingerprint"] if indexed else data_fingerprint(uri)
        index = uri if indexed else self._cached_index(uri, fingerprint, context)
        header, _ = index_header(index)
        meta = header["meta"]
        shape = tuple(int(v) for v in header["arrays"]["images"]["shape"])
        layout, decisions = self._from_index(meta, shape, index)
        labels, split = read_array(index, "labels"), read_array(index, "split")
        train_rows, val_rows = self._split(split, labels, seed)
        fit, evaluation = self._transforms(layout)
        train, val = self.sharded_splits(index, train_rows, val_rows, ImageRow(fit), ImageRow(evaluation), seed)
        sample = train.sample_arrays(2000)["images"]
        mean, std = self._statistics(ArrayImages(sample, np.zeros(len(sample), np.int64), np.arange(len(sample)),
                                                 evaluation))
        classes = meta["classes"]
        spec = self._spec(layout, classes, mean, std)
        fs, path = filesystem(index)
        details = {"images": int(len(labels)), "train_images": int(len(train_rows)), "val_images": int(len(val_rows)),
                   "index": indexed, "channels": layout["channels"], "input_size": layout["size"], "sharded": True,
                   "shards": len(train.shards), **_skipped_details(meta.get("skipped", []))}
        return PreparedData(train, val, spec, fingerprint, uri, int(fs.size(path)), details, decisions=decisions)

    # ---------------------------------------------------- test and new images
    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Images for a run trained on ``spec``, decoded, resized and centre-cropped as its validation images were
        (the run's size, channels and interpolation; a grey run's images are read grey, whatever their mode).

        ``uri`` is a folder with one folder per class (labelled: classes mapped by name as the run mapped them;
        images of a class the run never saw are left out and counted in ``details["unseen_classes"]``), a folder
        of images (unlabelled), or one image file. ``targets=False`` reads every image, unlabelled. Sample ids
        are the images' paths below ``uri``. Files that cannot be read follow ``bad_files``: a named error, or
        left out and counted in ``details``.

        Raises:
            EmptyDataError: no image. CorruptImageError, UnsupportedFormatError: a bad file (``bad_files="error"``).
        """
        if is_hf_dataset(uri):
            return self._hf_samples(uri, spec, targets)
        fs, root = require_exists(uri)
        if fs.isdir(root):
            folders = sorted(p.rstrip("/") for p in fs.ls(root, detail=False) if fs.isdir(p)
                             and not p.rstrip("/").rsplit("/", 1)[-1].startswith("."))
            entries = [(p, f.rsplit("/", 1)[-1]) for f in folders for p in sorted(fs.find(f)) if _kept(p)]
            entries += [(p, None) for p in sorted(fs.ls(root, detail=False)) if not fs.isdir(p) and _kept(p)]
        else:
            entries = [(root, None)]
        if not entries:
            raise EmptyDataError(f"'{uri}' holds no image; give a folder of images (one folder per class to "
                                 "evaluate) or an image file")
        found = survey(fs, [p for p, _ in entries], self.bad_files)
        good = set(found.paths)
        entries = [e for e in entries if e[0] in good]
        details: dict[str, Any] = {"images": len(entries), **_skipped_details(found.skipped)}
        labelled = targets and bool(entries) and all(c is not None for _, c in entries)
        if labelled:
            lookup = {name: i for i, name in enumerate(spec.class_names)}
            unseen: dict[str, int] = {}
            for _, name in entries:
                if name not in lookup:
                    unseen[str(name)] = unseen.get(str(name), 0) + 1
            if unseen:
                details["unseen_classes"] = unseen
            entries = [e for e in entries if e[1] in lookup]
            labels = np.array([lookup[c] for _, c in entries], dtype=np.int64)
        else:
            labels = np.zeros(len(entries), dtype=np.int64)
        layout = self._layout_of(spec)
        paths = [p for p, _ in entries]
        images: Dataset = FileImages(fs, paths, labels, np.arange(len(paths)), layout, EvalTransform(layout["size"]))
        ids = [p[len(root):].lstrip("/") or p.rsplit("/", 1)[-1] for p in paths]
        fingerprint = data_fingerprint(uri)
        return Samples(images if labelled else _Inputs(images), labelled, fingerprint, uri, ids, details)

    def _hf_samples(self, uri: str, spec: DataSpec, targets: bool) -> Samples:
        """A Hugging Face dataset folder's test split (else validation, else train) for a run trained on ``spec``:
        its images decoded as the run's validation images were, labelled by class name (classes the run never saw
        left out and counted); ids ``<shard>, row N``."""
        _, entries, blobs = self.hf_images(uri, evaluation=True)
        found = survey(None, [w for w, _, _ in entries], self.bad_files, read=blobs.__getitem__)
        good = set(found.paths)
        entries = [e for e in entries if e[0] in good]
        details: dict[str, Any] = {"images": len(entries), **_skipped_details(found.skipped)}
        lookup = {name: i for i, name in enumerate(spec.class_names)}
        if targets:
            unseen: dict[str, int] = {}
            for _, name, _ in entries:
                if name not in lookup:
                    unseen[name] = unseen.get(name, 0) + 1
            if unseen:
                details["unseen_classes"] = unseen
            entries = [e for e in entries if e[1] in lookup]
        if not entries:
            raise EmptyDataError(f"'{uri}' has no image of the run's classes to score")
        layout = self._layout_of(spec)
        images = np.stack([decode_image(blobs[w], w, layout["store"], layout["channels"], layout["interpolation"])
                           for w, _, _ in entries])
        labels = np.array([lookup.get(c, 0) for _, c, _ in entries], dtype=np.int64)
        dataset: Dataset = ArrayImages(images, labels, np.arange(len(entries)), EvalTransform(layout["size"]))
        return Samples(dataset if targets else _Inputs(dataset), targets, data_fingerprint(uri), uri,
                       [w for w, _, _ in entries], details)

    def samples_from(self, items: Any, spec: DataSpec) -> Samples:
        """In-memory images — Pillow images, ``H × W`` or ``H × W × C`` uint8 arrays, or encoded file bytes —
        as unlabelled samples, each read as a file of the run's would be. Ids are their positions (``0``, ``1``, ...).

        Raises:
            CorruptImageError: an item that is no image (its position named).
        """
        import io

        from PIL import Image

        encoded = []
        for position, item in enumerate(items):
            if isinstance(item, (bytes, bytearray)):
                encoded.append(bytes(item))
                continue
            if isinstance(item, np.ndarray):
                item = Image.fromarray(item)
            if not hasattr(item, "save"):
                raise CorruptImageError(f"item {position} is a {type(item).__name__}, not an image; pass Pillow "
                                        "images, uint8 arrays or encoded image bytes")
            buffer = io.BytesIO()
            item.save(buffer, format="PNG")  # lossless: decoded below exactly as a file would be
            encoded.append(buffer.getvalue())
        if not encoded:
            raise EmptyDataError("no images were given to predict")
        layout = self._layout_of(spec)
        images = _EncodedImages(encoded, layout, EvalTransform(layout["size"]))
        digest = hashlib.md5(b"".join(hashlib.md5(e).digest() for e in encoded)).hexdigest()
        return Samples(images, False, f"md5:{digest}", "<in-memory images>", [str(i) for i in range(len(encoded))],
                       {"images": len(encoded)})

    @staticmethod
    def _layout_of(spec: DataSpec) -> dict[str, Any]:
        """How a run trained on ``spec`` stores an image: its size, stored side, channels and interpolation."""
        size = int(spec.input_shape[-1])
        preprocess = spec.extra.get("preprocess", {})
        return {"size": size, "store": int(preprocess.get("resize_shorter_side", size)),
                "channels": int(spec.input_shape[0]), "interpolation": preprocess.get("interpolation", "bilinear")}

    def preprocessing(self, spec: DataSpec) -> dict[str, Any]:
        """How an image becomes the model's input, with every value ``twinkle predict model.onnx`` needs to do it
        without this plugin (core's ``image`` reader): the files ``read_samples`` lists (``suffixes``; hidden files
        and ``ignored`` names left out), decoded EXIF-oriented in ``mode`` (16-bit values scaled to 8 bits,
        palettes expanded, transparency composited on white), the shorter side resized to ``resize_shorter_side``
        with Pillow's ``interpolation`` filter and the centre square kept, a centre crop of ``size``, pixels scaled
        to [0, 1] in channel-first order; the model normalises them. Files that cannot be read follow the run's
        ``bad_files`` (``error`` or ``skip``), as ``read_samples`` does."""
        layout = self._layout_of(spec)
        return {"reader": "image", "size": layout["size"], "channels": layout["channels"],
                "mode": "L" if layout["channels"] == 1 else "RGB", "orientation": "EXIF",
                "transparency": "composited on white", "sixteen_bit": "scaled to 8 bits (by 65535, or 255)",
                "resize_shorter_side": layout["store"], "square": "the centre square of resize_shorter_side",
                "center_crop": layout["size"], "interpolation": layout["interpolation"],
                "suffixes": list(IMAGE_SUFFIXES), "ignored": list(IGNORED_FILES), "bad_files": self.bad_files,
                "pixel_range": [0, 1], "layout": "CHW", "dtype": "float32",
                "scaling": "inside the model (mean and std buffers)"}

    @staticmethod
    def _spec(layout: dict[str, Any], classes: list[str], mean: list[float], std: list[float]) -> DataSpec:
        """The spec: ``C × size × size`` floats in [0, 1], and how to preprocess an image for the model."""
        size, channels = layout["size"], layout["channels"]
        preprocess = {"resize_shorter_side": layout["store"], "center_crop": size,
                      "interpolation": layout["interpolation"], "pixel_range": [0, 1],
                      "mode": "L" if channels == 1 else "RGB"}
        return DataSpec("image_classification", (channels, size, size), num_classes=len(classes),
                        class_names=tuple(classes), extra={"mean": mean, "std": std, "preprocess": preprocess})

    def _split(self, split: np.ndarray, labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        if (split == 1).any():
            return np.flatnonzero(split == 1), np.flatnonzero(split == 2)
        return split_indices(len(labels), self.val_fraction, seed, labels)

    @staticmethod
    def _statistics(view: Dataset) -> tuple[list[float], list[float]]:
        """Per-channel mean and standard deviation of (up to 2,000) training images as the model sees them at
        validation (centre crop), in [0, 1] units."""
        positions = np.linspace(0, len(view) - 1, min(len(view), 2000)).astype(int)
        sample = np.stack([view[int(i)][0].numpy() for i in positions]).astype(np.float64)
        mean = sample.mean(axis=(0, 2, 3))
        std = sample.std(axis=(0, 2, 3))
        return mean.tolist(), np.where(std > 1e-6, std, 1.0).tolist()


def _kept(path: str) -> bool:
    """Whether a file under a class folder is data (not hidden, not operating-system litter)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return not name.startswith(".") and name.lower() not in IGNORED_FILES


def _skipped_details(skipped: list[Any]) -> dict[str, Any]:
    """The run-record facts about skipped files: the count and (up to 100 of) the files with their reasons."""
    if not skipped:
        return {}
    return {"skipped_files": len(skipped),
            "skipped": [{"path": str(p), "reason": str(r)} for p, r in list(skipped)[:100]]}
