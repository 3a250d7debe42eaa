"""Where a YOLO ``data.yaml``'s splits are: one resolver for ``fit``, ``evaluate`` and ``predict``.

ultralytics' rules (``ultralytics.data.utils.check_det_dataset`` and ``BaseDataset.get_img_files``), with one
difference:

* The dataset root is ``path:``; without it, the YAML's own folder. A relative ``path:`` is read from the YAML's
  folder (ultralytics reads it from the current directory, then its settings' ``datasets_dir``: a hidden, per-machine
  place that Twinkle does not depend on — for a YAML in the folder you run from, the two agree).
* A split (``train``, ``val``, ``test``, ``minival``) is one entry or a list of entries, each relative to the root
  (or absolute); a single entry starting ``../`` that does not exist is also tried without it, as ultralytics does.
* An entry is a folder (its images at any depth) or a ``.txt`` file listing one image per line (UTF-8, a byte-order
  mark allowed); a line starting ``./`` is relative to the ``.txt``'s folder, as in ultralytics. Other relative
  lines are read from the ``.txt``'s folder too (ultralytics reads them from the current directory).

Each image's labels are where ultralytics looks: its path with the last ``/images/`` replaced by ``/labels/``
and the suffix by ``.txt``.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import yaml

from twinkle_core.data import DataError, EmptyDataError, data_fingerprint

IMAGE_SUFFIXES = (".bmp", ".jpg", ".jpeg", ".png", ".tif", ".tiff", ".webp")
"""Image file endings read (case-insensitive)."""

SPLITS = ("train", "val", "test", "minival")
"""The split keys a ``data.yaml`` may hold (ultralytics' list)."""


def dataset_root(data: dict[str, Any], yaml_path: str) -> str:
    """The absolute folder a ``data.yaml``'s splits are relative to: its ``path:`` (relative: to the YAML's
    folder), else the YAML's folder."""
    base = os.path.dirname(os.path.abspath(yaml_path))
    given = data.get("path")
    return os.path.normpath(os.path.join(base, str(given))) if given else base


def split_entries(data: dict[str, Any], split: str, yaml_path: str, root: str, *, check: bool = True) -> list[str]:
    """The absolute entries (folders or ``.txt`` lists) of ``data[split]``, resolved against ``root``.

    Args:
        data: the parsed YAML. split: ``train``, ``val``, ``test`` or ``minival``.
        yaml_path: the YAML, for messages. root: ``dataset_root``'s answer.
        check: raise for an entry that does not exist (``False``: resolve only; ``split_images`` checks).

    Raises:
        DataError: the split is neither a path nor a list of paths, or (``check``) an entry does not exist, naming
            the entry, the YAML and where it looked.
    """
    given = data.get(split)
    if isinstance(given, (str, os.PathLike)):
        entry = str(given)
        found = os.path.normpath(os.path.join(root, entry))
        if not os.path.exists(found) and entry.startswith("../"):  # ultralytics' second try
            retry = os.path.normpath(os.path.join(root, entry[3:]))
            found = retry if os.path.exists(retry) else found
        if check and not os.path.exists(found):
            raise DataError(f"the {split} split '{entry}' of '{yaml_path}' does not exist (looked in {found}; "
                            f"splits are relative to the dataset root {root}: its path: entry, else the YAML's "
                            "folder)")
        return [found]
    if isinstance(given, list) and given and all(isinstance(e, (str, os.PathLike)) for e in given):
        entries = [os.path.normpath(os.path.join(root, str(e))) for e in given]
        for entry, found in zip(given, entries):
            if check and not os.path.exists(found):
                raise DataError(f"the {split} split entry '{entry}' of '{yaml_path}' does not exist (looked in "
                                f"{found}; splits are relative to the dataset root {root})")
        return entries
    raise DataError(f"'{yaml_path}': {split}: must be a folder or a .txt list of images, or a list of them "
                    f"(relative to path:), got {given!r}")


def split_images(entries: list[str], split: str = "split") -> list[str]:
    """The images of a split's entries, sorted as ultralytics sorts them (duplicates kept once).

    Raises:
        DataError: an entry, or a ``.txt`` line's image, that does not exist (the file and line named).
        EmptyDataError: no image in the entries.
    """
    images: list[str] = []
    for entry in entries:
        if os.path.isdir(entry):
            images += [os.path.join(folder, name) for folder, _, files in os.walk(entry) for name in files
                       if name.lower().endswith(IMAGE_SUFFIXES)]
        elif os.path.isfile(entry):
            images += _listed(entry)
        else:
            raise DataError(f"the {split} split's '{entry}' does not exist; give a folder of images or a .txt file "
                            "listing them")
    if not images:
        raise EmptyDataError(f"'{described(entries)}' has no images ({', '.join(IMAGE_SUFFIXES)})")
    return sorted(set(images))


def _listed(listing: str) -> list[str]:
    """The images a ``.txt`` lists (see the module docstring), each checked to exist."""
    try:
        with open(listing, encoding="utf-8-sig") as handle:
            lines = handle.read().strip().splitlines()
    except UnicodeDecodeError as err:
        raise DataError(f"'{listing}' is not UTF-8 text ({err.reason} at byte {err.start}); a split list holds "
                        "one image path per line") from None
    folder = os.path.dirname(listing)
    images = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or not line.lower().endswith(IMAGE_SUFFIXES):
            continue  # as ultralytics: only image files count
        image = os.path.normpath(os.path.join(folder, line[2:] if line.startswith("./") else line))
        if not os.path.isfile(image):
            raise DataError(f"'{listing}' line {number} names '{image}', which does not exist; list images that "
                            "exist (./ lines are relative to the list's folder)")
        images.append(image)
    return images


def described(entries: list[str]) -> str:
    """A split's entries, for messages: the one entry, or all of them separated by commas."""
    return entries[0] if len(entries) == 1 else ", ".join(entries)


def label_path(image: str) -> str:
    """YOLO's convention: ``.../images/x.png`` → ``.../labels/x.txt`` (the last ``/images/``)."""
    head, _, tail = image.rpartition(f"{os.sep}images{os.sep}")
    return f"{head}{os.sep}labels{os.sep}{os.path.splitext(tail)[0]}.txt"


def outside(paths: list[str], folder: str) -> list[str]:
    """Those of ``paths`` that are not inside ``folder`` (nor ``folder`` itself), without repeats or nesting:
    what a fingerprint of ``folder`` alone would miss."""
    folder = os.path.abspath(folder)
    found: list[str] = []
    for path in sorted(set(map(os.path.abspath, paths)), key=len):
        if os.path.commonpath([folder, path]) == folder:
            continue
        if any(os.path.commonpath([kept, path]) == kept for kept in found):
            continue
        found.append(path)
    return found


def with_outside_data(yaml_path: str, fingerprint: str, exclude: tuple[str, ...] = ()) -> str:
    """``fingerprint`` (of the YAML's folder) combined with the fingerprint of each folder (or list) the YAML's
    root and splits reach outside that folder: ``md5:`` of ``fingerprint`` and one ``<path relative to the YAML's
    folder>\t<its fingerprint>`` line each, joined by newlines; ``fingerprint`` unchanged when there is none.
    ``exclude``: as ``data_fingerprint``'s."""
    folder = os.path.dirname(os.path.abspath(yaml_path))
    reached = _reached(yaml_path)
    extra = outside(reached, folder)
    if not extra:
        return fingerprint
    lines = [fingerprint] + [f"{os.path.relpath(p, folder)}\t{data_fingerprint(p, exclude)}"
                             for p in extra]
    return "md5:" + hashlib.md5("\n".join(lines).encode("utf-8")).hexdigest()


def _reached(yaml_path: str) -> list[str]:
    """The existing folders (and lists) a YAML's data lives in: its root, each split entry and, for images a
    ``.txt`` lists, the folder above their ``images/`` (their labels too); nothing where the YAML does not parse
    (``load_yaml`` names that later)."""
    try:
        with open(yaml_path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        root = dataset_root(data, yaml_path)
        entries = [e for split in SPLITS if data.get(split)
                   for e in split_entries(data, split, yaml_path, root, check=False)]
    except (yaml.YAMLError, UnicodeDecodeError, OSError, AttributeError, TypeError, DataError):
        return []
    reached = [root, *entries]
    for entry in entries:
        if os.path.isfile(entry):
            try:
                listed = split_images([entry])
            except DataError:  # a line naming a missing image: named when that split is read
                continue
            reached += [image.rpartition(f"{os.sep}images{os.sep}")[0] or os.path.dirname(image) for image in listed]
    return [p for p in reached if os.path.exists(p)]


__all__ = ["IMAGE_SUFFIXES", "SPLITS", "dataset_root", "described", "label_path", "outside", "split_entries",
           "split_images", "with_outside_data"]
