"""``YoloDataProcessor``: object-detection data in YOLO format (``data.yaml``, images, labels) at any URI.

The URI names the dataset folder (holding ``data.yaml``) or the ``data.yaml`` itself. Its splits are found as
ultralytics finds them — relative to ``path:``, folders, lists of them, ``.txt`` lists of images — by one resolver
that ``fit``, ``evaluate`` and ``predict`` share (``twinkle_vision.yolo.splits``). Remote data (``s3://``,
``nas://``, ...) is staged once into the run store's cache, keyed by its fingerprint. Every label file is
checked before training: five columns per line (``class x_center y_center width height``), a class id within
``names``, coordinates in [0, 1] — each violation is a named error with the file and line. Datasets,
augmentation (mosaic, HSV, flips) and batching are ultralytics' own.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import yaml

from twinkle_core.data import (
    DataError,
    DataProcessor,
    DataSpec,
    EmptyDataError,
    MissingColumnError,
    PrepareContext,
    PreparedData,
    Samples,
    data_fingerprint,
    filesystem,
    is_local,
    join,
    local_cache_dir,
    require_exists,
)
from twinkle_core import with_new_names
from twinkle_vision.yolo.splits import (
    IMAGE_SUFFIXES,
    SPLITS,
    dataset_root,
    described,
    label_path,
    split_entries,
    split_images,
    with_outside_data,
)

ULTRALYTICS_FORMATS = ("bmp", "dng", "jpeg", "jpg", "jpeg2000", "jp2", "mpo", "png", "tif", "tiff", "webp")
"""The image formats (Pillow's names, lower case) ultralytics' datasets read; other files are skipped."""
FINGERPRINT_EXCLUDE = ("*.cache",)
"""ultralytics writes ``labels/<split>.cache`` into the dataset: it is not part of the data's identity."""


class LabelError(DataError):
    """A YOLO label line that is malformed: wrong column count, class out of range, coordinates outside [0, 1]."""


def load_yaml(path: str, required: tuple[str, ...] = ("train", "val")) -> dict[str, Any]:
    """The dataset description with ``path`` the dataset root, each split as a list of absolute entries (folders or
    ``.txt`` lists of images, resolved as ultralytics resolves them: ``twinkle_vision.yolo.splits``) and ``names``
    as ``{id: name}``.

    Args:
        path: the local ``data.yaml``.
        required: the splits that must be named and exist (``fit``: train and val; ``evaluate`` and ``predict``
            pass none and use ``test``, else ``val``); the others are resolved without being checked.

    Raises:
        MissingColumnError: no ``names`` or no required split; DataError: a required split's entry is missing.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise DataError(f"'{path}'{where} is not valid YAML ({problem}); a YOLO data.yaml looks like "
                        "'train: images/train', 'val: images/val', 'names: [cat, dog]'") from None
    except UnicodeDecodeError as err:
        raise DataError(f"'{path}' is not UTF-8 text ({err.reason} at byte {err.start}); save it as UTF-8") from None
    if not isinstance(data, dict):
        raise DataError(f"'{path}' holds a {type(data).__name__}, not a mapping; a YOLO data.yaml maps train, val "
                        "and names to values")
    root = dataset_root(data, path)
    for key in ("names", *required):
        if key not in data:
            raise MissingColumnError(f"'{path}' has no '{key}:' entry; a YOLO data.yaml needs names, train and val")
    names = data["names"]
    if isinstance(names, list):
        names = dict(enumerate(str(n) for n in names))
    elif isinstance(names, dict):
        try:
            names = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            raise DataError(f"'{path}': names keys must be class ids 0, 1, ... (got {list(names)[:3]})") from None
        if sorted(names) != list(range(len(names))):
            raise DataError(f"'{path}': names ids must run 0..{len(names) - 1} without gaps (got {sorted(names)})")
    else:
        raise DataError(f"'{path}': names must be a list or an id → name mapping, got {names!r}")
    if not names:
        raise DataError(f"'{path}' names no classes; list them under names:")
    for split in SPLITS:
        if data.get(split):
            data[split] = split_entries(data, split, path, root, check=split in required)
    return {**data, "path": root, "names": names, "nc": len(names), "channels": 3}


def scored_split(data: dict[str, Any], path: str) -> str:
    """The split ``evaluate`` and ``predict`` read from a ``data.yaml``: ``test``, else ``val``.

    Raises:
        MissingColumnError: the YAML names neither.
    """
    for split in ("test", "val"):
        if data.get(split):
            return split
    raise MissingColumnError(f"'{path}' has neither a 'test:' nor a 'val:' entry; evaluate and predict read the "
                             "test split (else val): add 'test: images/test'")


def check_labels(images: str | list[str], nc: int, where: str | None = None) -> tuple[int, int]:
    """Validate every label of ``images`` (a list of image files, or a folder of them); returns (images, boxes).

    Args:
        images: the split's images (``split_images``), or a folder (its images at any depth).
        nc: the number of classes. where: the split's entries, for messages (default: the folder).

    Raises:
        EmptyDataError: no images; LabelError: the first bad line, with file, line number and the fix.
    """
    if isinstance(images, str):
        where, images = where or images, split_images([images])
    if not images:
        raise EmptyDataError(f"'{where}' has no images ({', '.join(IMAGE_SUFFIXES)})")
    where = where or os.path.commonpath([os.path.dirname(image) for image in images])
    stray = next((image for image in images if f"{os.sep}images{os.sep}" not in image), None)
    if stray is not None:
        raise DataError(f"'{where}' is not inside an 'images' folder ('{stray}'); YOLO finds each image's labels by "
                        "replacing /images/ with /labels/ in its path: lay the data out as images/<split>/ and "
                        "labels/<split>/")
    labels_dir = os.path.dirname(label_path(images[0]))
    if not any(os.path.exists(label_path(image)) for image in images):
        raise DataError(f"none of the {len(images)} images in '{where}' has a label file (looked for "
                        f"'{label_path(images[0])}'); put one .txt per image in '{labels_dir}' (the YOLO layout is "
                        "images/<split>/x.jpg with labels/<split>/x.txt)")
    boxes = 0
    for image in images:
        labels = label_path(image)
        if not os.path.exists(labels):
            continue  # an image without objects (a background image)
        with open(labels, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                fields = line.split()
                if not fields:
                    continue
                at = f"label '{labels}' line {number}"
                if len(fields) != 5:
                    raise LabelError(f"{at} has {len(fields)} columns; YOLO boxes need 5: class x_center "
                                     "y_center width height")
                try:
                    cls, *coords = int(float(fields[0])), *(float(v) for v in fields[1:])
                except ValueError:
                    raise LabelError(f"{at} holds text where numbers belong: {line.strip()!r}") from None
                if not 0 <= cls < nc:
                    raise LabelError(f"{at} has class id {cls}, but data.yaml names {nc} classes (0–{nc - 1})")
                if not all(0.0 <= c <= 1.0 for c in coords):
                    raise LabelError(f"{at} has coordinates outside [0, 1] ({' '.join(fields[1:])}); YOLO "
                                     "labels are normalised by the image size")
                boxes += 1
    return len(images), boxes


class YoloDataProcessor(DataProcessor):
    """YOLO-format detection data at any URI (see the module docstring)."""

    task = "object_detection"
    renamed_parameters = {"imgsz": "image_size"}  # ultralytics' name, accepted for this release

    def __init__(self, image_size: int = 640, cache_images: bool = False, **old_names: Any) -> None:
        """Configure the processor.

        Args:
            image_size: the training and validation image side (ultralytics' ``imgsz``: it letterboxes to it) —
                the name classification uses too.
            cache_images: keep decoded images in memory after the first epoch (ultralytics' ``cache=ram``).
            old_names: ``imgsz=`` (``image_size``'s old name), with a ``DeprecationWarning``.

        Raises:
            TypeError: a keyword that is neither a parameter nor an old name of one.
        """
        super().__init__()
        given = with_new_names(old_names, self.renamed_parameters, type(self).__name__)
        unknown = sorted(set(given) - {"image_size"})
        if unknown:
            raise TypeError(f"YoloDataProcessor() got unexpected keyword argument(s) {', '.join(unknown)}")
        self.image_size, self.cache_images = given.get("image_size", image_size), cache_images

    def local_yaml(self, uri: str, context: PrepareContext | None = None) -> tuple[str, str]:
        """A local path of the dataset's ``data.yaml`` (staging remote data into ``context``'s cache) and the
        data's fingerprint: the YAML's folder's; when ``path:`` or a split lies outside that folder (a local
        dataset laid out as ultralytics' own YAMLs are), the MD5 of that fingerprint and of each outside folder's
        (``<path relative to the YAML's folder>\t<its fingerprint>`` lines)."""
        context = self.context(context)
        fs, path = require_exists(uri)
        is_dir = fs.isdir(path)
        folder = path if is_dir else path.rsplit("/", 1)[0]
        folder_uri = uri if is_dir else uri.rstrip("/").rsplit("/", 1)[0]
        yaml_name = "data.yaml" if is_dir else path.rsplit("/", 1)[-1]
        if not fs.exists(join(folder, yaml_name)):
            raise MissingColumnError(f"'{uri}' has no data.yaml; a YOLO dataset folder needs one")
        fingerprint = data_fingerprint(folder_uri, FINGERPRINT_EXCLUDE)
        if is_local(fs):
            local_path = os.path.join(folder, yaml_name)
            return local_path, with_outside_data(local_path, fingerprint, FINGERPRINT_EXCLUDE)
        staged = context.cache_dir("datasets", fingerprint.removeprefix("md5:"))
        local_fs, local = filesystem(staged)
        if not local_fs.exists(join(local, yaml_name)):
            files = [p for p in fs.find(folder) if not p.endswith(".cache")]
            for remote in files:
                target = os.path.join(local, remote[len(folder.rstrip("/")) + 1 :])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                fs.get_file(remote, target)
        return os.path.join(local, yaml_name), fingerprint

    def mirror(self, data: dict[str, Any], fingerprint: str, context: PrepareContext | None = None,
               splits: tuple[str, ...] = SPLITS) -> dict[str, Any]:
        """``data`` with its ``splits`` pointing into a mirror of links in the run store's cache (``context``'s):
        each split a list of image folders holding links to exactly its images (from folders and ``.txt`` lists
        alike), each image's labels beside them where ultralytics looks.

        ultralytics writes a ``labels/<split>.cache`` file next to the labels; with the mirror that file lands
        in Twinkle's cache, keyed by the data's fingerprint, and the user's dataset folder is left as it was.
        """
        mirrored = dict(data)
        for split in splits:
            entries = data.get(split)
            if isinstance(entries, list) and entries and all(os.path.exists(e) for e in entries):
                mirrored[split] = self._mirror_split(split_images(entries, split), split, fingerprint, context)[0]
        return mirrored

    def _mirror_split(self, images: list[str], split: str, fingerprint: str,
                      context: PrepareContext | None) -> tuple[list[str], dict[str, str]]:
        """Links to ``images`` and their labels under the cache's mirror of ``split`` (a folder per set of images,
        so that two YAMLs of one dataset choosing different images never share one): the folders to hand
        ultralytics, and each link's image (by normalised path)."""
        cache = self.context(context).cache_dir("datasets")
        base = cache if "://" not in cache else os.path.join(local_cache_dir(), "datasets")  # links are local
        chosen = hashlib.md5("\n".join(images).encode("utf-8")).hexdigest()[:10]  # two YAMLs, two subsets
        target = os.path.join(base, f"{fingerprint.removeprefix('md5:')}-links", f"{split}-{chosen}")
        marker = f"{os.sep}images{os.sep}"
        heads = sorted({image.rpartition(marker)[0] for image in images})  # one mirror folder per dataset root
        number = {head: str(n) for n, head in enumerate(heads)}
        sources: dict[str, str] = {}
        for image in images:
            head, _, rest = image.rpartition(marker)
            link = os.path.join(target, number[head], "images", rest)
            label = os.path.join(target, number[head], "labels", os.path.splitext(rest)[0] + ".txt")
            for source, linked in ((image, link), (label_path(image), label)):
                if os.path.exists(source) and not os.path.lexists(linked):
                    os.makedirs(os.path.dirname(linked), exist_ok=True)
                    _link(source, linked)
            sources[os.path.normpath(link)] = image
        return [os.path.join(target, n, "images") for n in number.values()], sources

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Images read at the run's image size as its validation images were (ultralytics' letterbox). Ids are
        the images' paths (URIs for remote data).

        With ``targets`` (``evaluate``): the test images and boxes of a YOLO dataset (its ``data.yaml``'s ``test``
        split, else ``val``), whose classes must be the run's, in the run's order (a YOLO label is a class
        index). Without (``predict``): the same split of a YOLO dataset, or every image of a folder (any depth)
        or a single image file; labels are not read. Images that cannot be decoded are skipped and counted
        (``details["skipped"]``), as ultralytics skips them.

        Raises:
            DataError: other classes than the run's, named with both lists. LabelError: bad labels, as for
                training. EmptyDataError: no image at ``uri``.
        """
        if not targets:
            return self._unlabelled(uri, spec, context)
        from twinkle_vision.yolo import offline

        context = self.context(context)
        path, fingerprint = self.local_yaml(uri, context)
        data = load_yaml(path, required=())
        names = [str(data["names"][i]) for i in range(int(data["nc"]))]
        if names != list(spec.class_names):
            raise DataError(f"'{uri}' has the classes {names}, the run {list(spec.class_names)}: a YOLO label is a "
                            "class index, so the test set must list the run's classes in the run's order")
        split = scored_split(data, path)
        files = split_images(data[split], split)
        images, boxes = check_labels(files, data["nc"], described(data[split]))
        folders, sources = self._mirror_split(files, split, fingerprint, context)  # ultralytics writes in the mirror
        offline.prepare()
        dataset = _val_dataset(folders, data, spec)
        return Samples(dataset, True, fingerprint, uri, [sources[os.path.normpath(p)] for p in dataset.im_files],
                       {"split": split, "images": images, "boxes": boxes}, collate_fn=dataset.collate_fn)

    def _unlabelled(self, uri: str, spec: DataSpec, context: PrepareContext | None) -> Samples:
        """The images ``predict`` reads (see ``read_samples``), linked into a folder of the cache so that
        ultralytics writes nothing beside them, with their ids."""
        from twinkle_vision.yolo import offline

        context = self.context(context)
        fs, path = require_exists(uri)
        details: dict[str, Any] = {}
        if path.endswith((".yaml", ".yml")) or (fs.isdir(path) and fs.exists(join(path, "data.yaml"))):
            yaml_path, fingerprint = self.local_yaml(uri, context)  # local: a remote dataset is staged
            data = load_yaml(yaml_path, required=())
            details["split"] = split = scored_split(data, yaml_path)
            files = split_images(data[split], split)
            path = os.path.commonpath([os.path.dirname(f) for f in files])
            fs = filesystem(path)[0]
        else:
            fingerprint = data_fingerprint(uri, FINGERPRINT_EXCLUDE)
            files = [p for p in (sorted(fs.find(path)) if fs.isdir(path) else [path])
                     if p.lower().endswith(IMAGE_SUFFIXES)]
        if not files:
            raise EmptyDataError(f"'{uri}' holds no image ({', '.join(IMAGE_SUFFIXES)}); point predict at a folder "
                                 "of images, one image, or a YOLO dataset")
        folder = context.cache_dir("datasets")
        base = folder if "://" not in folder else os.path.join(local_cache_dir(), "datasets")
        images = os.path.join(base, f"{fingerprint.removeprefix('md5:')}-predict", "images")
        top = path if fs.isdir(path) else path.rsplit("/", 1)[0]
        ids: dict[str, str] = {}
        for remote in files:
            relative = remote[len(top.rstrip("/")) + 1:]
            link = os.path.join(images, relative)
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                if is_local(fs):
                    _link(remote, link)
                else:
                    fs.get_file(remote, link)
            ids[os.path.normpath(link)] = remote if is_local(fs) else fs.unstrip_protocol(remote)
        offline.prepare()
        names = dict(enumerate(spec.class_names))
        dataset = _val_dataset(images, {"names": names, "nc": len(names), "channels": 3}, spec)
        details.update({"images": len(dataset.im_files), "skipped": len(files) - len(dataset.im_files)})
        return Samples(dataset, False, fingerprint, uri, [ids[os.path.normpath(p)] for p in dataset.im_files], details,
                       collate_fn=dataset.collate_fn)

    def preprocessing(self, spec: DataSpec) -> dict[str, Any]:
        """How an image becomes the exported detector's input, with every value ``twinkle predict model.onnx``
        needs to do it without this plugin (core's ``yolo-images`` reader): the images ``read_samples`` lists
        (``suffixes``; hidden files left out; files Pillow cannot verify, of other ``formats`` or with a side under
        ``min_side`` skipped, as ultralytics skips them), EXIF-oriented RGB, the long side resized to ``size`` with
        OpenCV's bilinear filter, ultralytics' validation letterbox (centred on a square of grey ``pad_value``),
        scaled by 1/255 outside the model; boxes come back in the letterbox's pixels."""
        return {"reader": "yolo-images", "size": int(spec.extra.get("imgsz", spec.input_shape[-1])),
                "sources": "a YOLO dataset (its data.yaml's test split, else val), a folder of images (any depth) "
                           "or one image",
                "suffixes": [s.lstrip(".") for s in IMAGE_SUFFIXES], "formats": list(ULTRALYTICS_FORMATS),
                "min_side": 10, "orientation": "EXIF", "channels": "RGB",
                "resize": {"long_side": "size", "other_side": "rounded up", "interpolation": "opencv-linear"},
                "letterbox": {"long_side": "resized to size", "pad_value": 114, "centred": True, "scaleup": False},
                "layout": "CHW", "dtype": "float32", "scaling": "x / 255 outside the model"}

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Check the labels, then build ultralytics' train (augmented) and val (rectangular) datasets."""
        from twinkle_vision.yolo import offline

        context = self.context(context)
        seed = context.seed
        path, fingerprint = self.local_yaml(uri, context)
        data = load_yaml(path)
        files = {split: split_images(data[split], split) for split in ("train", "val")}
        counts = {split: check_labels(files[split], data["nc"], described(data[split])) for split in files}
        size = sum(os.path.getsize(f) for split in files for image in files[split]
                   for f in (image, label_path(image)) if os.path.exists(f))
        data = self.mirror(data, fingerprint, context, ("train", "val"))  # ultralytics writes in the mirror
        offline.prepare()
        from ultralytics.cfg import DEFAULT_CFG, get_cfg
        from ultralytics.data import build_yolo_dataset

        cfg = get_cfg(DEFAULT_CFG, {"imgsz": self.image_size, "workers": 0, "plots": False, "amp": False,
                                     "cache": "ram" if self.cache_images else False, "seed": seed})
        train = build_yolo_dataset(cfg, data["train"], 16, data, mode="train", stride=32)
        val = build_yolo_dataset(cfg, data["val"], 16, data, mode="val", rect=False, stride=32)
        names = tuple(data["names"][i] for i in range(data["nc"]))
        side = self.image_size
        spec = DataSpec("object_detection", (3, side, side), num_classes=data["nc"], class_names=names,
                        extra={"data_yaml": path, "imgsz": side})
        details = {"train_images": counts["train"][0], "train_boxes": counts["train"][1],
                   "val_images": counts["val"][0], "val_boxes": counts["val"][1],
                   "fingerprint_exclude": list(FINGERPRINT_EXCLUDE)}
        return PreparedData(train, val, spec, fingerprint, uri, size, details, collate_fn=train.collate_fn)


def _val_dataset(images: str | list[str], data: dict[str, Any], spec: DataSpec) -> Any:
    """ultralytics' validation dataset of ``images`` at the run's image size (letterboxed, not augmented)."""
    from ultralytics.cfg import DEFAULT_CFG, get_cfg
    from ultralytics.data import build_yolo_dataset

    size = int(spec.extra.get("imgsz", spec.input_shape[-1]))
    cfg = get_cfg(DEFAULT_CFG, {"imgsz": size, "workers": 0, "plots": False, "amp": False, "cache": False})
    return build_yolo_dataset(cfg, images, 16, data, mode="val", rect=False, stride=32)


def _link(source: str, link: str) -> None:
    """A symbolic link to ``source`` (a copy where the filesystem has no links)."""
    try:
        os.symlink(os.path.abspath(source), link)
    except OSError:
        import shutil

        shutil.copyfile(source, link)
