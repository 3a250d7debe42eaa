"""Hugging Face datasets on this machine, as data: a folder ``datasets`` wrote with ``save_to_disk`` (one dataset,
or a ``DatasetDict`` with a folder per split), or a folder in the Hub's layout (Parquet shards — ``data/<split>-*``,
``<split>/*.parquet`` or ``<split>-*.parquet`` —, its ``README.md`` card with ``configs``/``data_files``).

A processor that lists ``HF_FORMAT`` in its ``formats`` is chosen for such a folder; it reads it with
``open_hf_dataset``: the splits and their shard files, the features (``datasets``' own description, kept in each
shard's schema metadata: class names of a ``ClassLabel``, an ``Image`` column), and the rows of a split streamed
record batch by record batch — the shards are read with pyarrow, never loaded whole, and never through the network.
The run's fingerprint is the folder's (every shard, the card and ``dataset_info.json``). ``hf://`` URIs and Hub
ids are refused (``twinkle_core.uris.HUB_HINT``: how to point at a local copy).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from twinkle_core.data.errors import DataError, EmptyDataError
from twinkle_core.uris import filesystem, is_local

HF_FORMAT = "hf-dataset"
"""The format name of a Hugging Face dataset folder (what ``choose_processor`` matches a processor's ``formats``
against)."""

TRAIN_SPLITS = ("train",)
"""The split a training reads when the folder has several (the others are left to evaluation)."""

_SPLIT_NAMES = ("train", "validation", "valid", "dev", "test", "eval")


@dataclass
class HFDataset:
    """A Hugging Face dataset folder (see the module docstring).

    Attributes:
        uri: the folder.
        layout: ``"save_to_disk"`` (one dataset), ``"dataset_dict"`` (a folder per split) or ``"hub"`` (Parquet).
        splits: each split's shard files (local paths, in order).
        features: ``datasets``' features of the rows (``{"label": {"_type": "ClassLabel", "names": [...]}}``),
            as its shards' metadata describe them (empty where they do not).
    """

    uri: str
    layout: str
    splits: dict[str, list[str]]
    features: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str | None = None) -> str:
        """``name``, else the training split: ``train``, or the only one.

        Raises:
            DataError: no such split, or several and none named train (the splits listed).
        """
        if name is not None:
            if name not in self.splits:
                raise DataError(f"'{self.uri}' has no split '{name}'; its splits: {', '.join(self.splits)}")
            return name
        for candidate in TRAIN_SPLITS:
            if candidate in self.splits:
                return candidate
        if len(self.splits) == 1:
            return next(iter(self.splits))
        raise DataError(f"'{self.uri}' has the splits {', '.join(self.splits)} and none is 'train'; "
                        "rename the training split to train")

    def evaluation_split(self) -> str:
        """The split an evaluation reads: ``test``, else ``validation``, else the training split."""
        for candidate in ("test", "validation", "valid", "eval", "dev"):
            if candidate in self.splits:
                return candidate
        return self.split()

    def class_names(self, column: str) -> list[str] | None:
        """The class names of a ``ClassLabel`` column, or ``None`` for another kind of column."""
        feature = self.features.get(column) or {}
        names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None
        return [str(n) for n in names] if names else None

    def image_columns(self) -> list[str]:
        """The columns of ``Image`` features (each value ``{"bytes": ..., "path": ...}``)."""
        return [name for name, f in self.features.items() if isinstance(f, dict) and f.get("_type") == "Image"]

    def batches(self, split: str | None = None) -> Iterator[tuple[str, int, Any]]:
        """``(shard, first row number, pyarrow RecordBatch)`` of a split, one record batch in memory at a time;
        the index a pandas frame left (``__index_level_0__``, kept by ``Dataset.from_pandas``) is not data and is
        left out."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for path in self.splits[self.split(split)]:
            start = 1
            if path.endswith(".arrow"):
                with pa.memory_map(path) as source:
                    for batch in _arrow_batches(source, path):
                        yield path, start, _without_index(batch)
                        start += batch.num_rows
            else:
                for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
                    yield path, start, _without_index(batch)
                    start += batch.num_rows

    def rows(self, split: str | None = None) -> Iterator[tuple[dict[str, Any], str, int]]:
        """Each row of a split as ``(values, shard, row number in the shard)``, streamed."""
        for path, start, batch in self.batches(split):
            for offset, values in enumerate(batch.to_pylist()):
                yield values, path, start + offset

    def table(self, split: str | None = None) -> Any:
        """A split's rows as one pyarrow ``Table`` (all of it in memory: for tables a processor holds whole).

        Raises:
            EmptyDataError: the split has no rows.
        """
        import pyarrow as pa

        batches = [batch for _, _, batch in self.batches(split)]
        if not batches or sum(b.num_rows for b in batches) == 0:
            raise EmptyDataError(f"split '{self.split(split)}' of '{self.uri}' has no rows")
        return pa.Table.from_batches(batches)


_PANDAS_INDEX = re.compile(r"^__index_level_\d+__$")


def _without_index(batch: Any) -> Any:
    """``batch`` without the columns a pandas index became."""
    kept = [name for name in batch.schema.names if not _PANDAS_INDEX.match(name)]
    return batch if len(kept) == len(batch.schema.names) else batch.select(kept)


def _arrow_batches(source: Any, path: str) -> Iterator[Any]:
    """The record batches of an Arrow file ``datasets`` wrote (its streaming format; the file format too)."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        try:
            whole = pa.ipc.open_file(source)
        except pa.ArrowInvalid as err:
            raise DataError(f"'{path}' is not an Arrow file datasets wrote: {err}") from err
        for index in range(whole.num_record_batches):
            yield whole.get_batch(index)
        return
    yield from reader


def is_hf_dataset(uri: str) -> bool:
    """Whether ``uri`` is a folder on this machine in one of the layouts of the module docstring."""
    try:
        fs, path = filesystem(uri)
        if not is_local(fs) or not fs.isdir(path):
            return False
    except Exception:  # a URI fsspec cannot open: not one
        return False
    return _layout(fs, path) is not None


def _layout(fs: Any, path: str) -> str | None:
    names = {p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)}
    if "dataset_dict.json" in names:
        return "dataset_dict"
    if "state.json" in names and "dataset_info.json" in names:
        return "save_to_disk"
    if "README.md" in names or "dataset_info.json" in names or "dataset_infos.json" in names:
        if any(p.endswith(".parquet") for p in fs.find(path)):
            return "hub"
    return None


def open_hf_dataset(uri: str) -> HFDataset:
    """The dataset folder ``uri``: its layout, splits (with their shards) and features.

    Raises:
        DataError: not such a folder, a split without shards, a ``save_to_disk`` state that names missing files.
    """
    fs, path = filesystem(uri)
    layout = _layout(fs, path) if is_local(fs) and fs.isdir(path) else None
    if layout is None:
        raise DataError(f"'{uri}' is not a Hugging Face dataset folder (save_to_disk's state.json and "
                        "dataset_info.json, dataset_dict.json, or Parquet shards beside a README.md card)")
    root = path.rstrip("/")
    if layout == "save_to_disk":
        splits = {"train": _saved_files(fs, root, uri)}
    elif layout == "dataset_dict":
        with fs.open(f"{root}/dataset_dict.json", "r") as handle:
            names = json.load(handle).get("splits") or []
        splits = {str(name): _saved_files(fs, f"{root}/{name}", uri) for name in names}
    else:
        splits = _hub_splits(fs, root, uri)
    splits = {name: files for name, files in splits.items() if files}
    if not splits:
        raise EmptyDataError(f"'{uri}' holds no data shards")
    return HFDataset(uri, layout, splits, _features(next(iter(splits.values()))[0]))


def _saved_files(fs: Any, folder: str, uri: str) -> list[str]:
    """The Arrow shards ``state.json`` of a ``save_to_disk`` folder lists."""
    with fs.open(f"{folder}/state.json", "r") as handle:
        state = json.load(handle)
    files = [f"{folder}/{entry['filename']}" for entry in state.get("_data_files", [])]
    missing = [f for f in files if not fs.exists(f)]
    if missing:
        raise DataError(f"'{uri}': state.json names shards that are missing ({', '.join(missing[:3])}); copy the "
                        "whole folder save_to_disk wrote")
    return files


def _hub_splits(fs: Any, root: str, uri: str) -> dict[str, list[str]]:
    """The Hub layout's splits: from the card's ``configs`` (the default or first configuration's ``data_files``),
    else from the shards' names (``data/train-*.parquet``, ``train/*.parquet``, ``*train*.parquet``)."""
    shards = sorted(p for p in fs.find(root) if p.endswith(".parquet"))
    declared = _card_data_files(fs, root)
    if declared:
        import fnmatch

        splits: dict[str, list[str]] = {}
        for split, patterns in declared.items():
            splits[split] = [p for p in shards if any(fnmatch.fnmatch(p[len(root) + 1:], pat) for pat in patterns)]
        return splits
    splits = {}
    for shard in shards:
        relative = shard[len(root) + 1:]
        parts = re.split(r"[/_.\-]", relative.lower())
        split = next((name for name in _SPLIT_NAMES if name in parts), "train")
        splits.setdefault(split, []).append(shard)
    return splits


def _card_data_files(fs: Any, root: str) -> dict[str, list[str]]:
    """``{split: [glob]}`` of the README card's first configuration (its YAML front matter), if it declares them."""
    card = f"{root}/README.md"
    if not fs.exists(card):
        return {}
    with fs.open(card, "r", encoding="utf-8") as handle:
        text = handle.read()
    match = re.match(r"^---\s*\n(.*?)\n---", text, re.S)
    if not match:
        return {}
    import yaml

    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError:
        return {}
    configs = meta.get("configs") or []
    config = next((c for c in configs if c.get("default")), configs[0] if configs else None)
    if not isinstance(config, dict):
        return {}
    files = config.get("data_files") or []
    if isinstance(files, str):
        return {"train": [files]}
    declared: dict[str, list[str]] = {}
    for entry in files:
        if isinstance(entry, dict) and "split" in entry:
            path = entry.get("path")
            declared[str(entry["split"])] = [path] if isinstance(path, str) else list(path or [])
    return declared


def _features(shard: str) -> dict[str, Any]:
    """``datasets``' features from a shard's schema metadata (empty where it has none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if shard.endswith(".parquet"):
            metadata = pq.read_schema(shard).metadata or {}
        else:
            with pa.memory_map(shard) as source:
                metadata = next(_arrow_batches(source, shard)).schema.metadata or {}
        described = json.loads(metadata.get(b"huggingface", b"{}"))
    except (StopIteration, ValueError, OSError):
        return {}
    features = (described.get("info") or {}).get("features") or {}
    return features if isinstance(features, dict) else {}


__all__ = ["HF_FORMAT", "HFDataset", "TRAIN_SPLITS", "is_hf_dataset", "open_hf_dataset"]
