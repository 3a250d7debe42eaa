"""``TabularProcessor``: numeric tables (CSV, Parquet, or a built index) for tabular tasks."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset, TensorDataset

from twinkle_core.data.errors import (
    DataError,
    EmptyDataError,
    MissingColumnError,
    MissingValueError,
    NonNumericError,
)
from twinkle_core.data.fingerprint import Manifest, Reader, read_file
from twinkle_core.data.hf import HF_FORMAT, is_hf_dataset, open_hf_dataset
from twinkle_core.data.index import index_header, is_index, read_array, read_index, write_index
from twinkle_core.data.indexed import IndexedProcessor
from twinkle_core.data.processor import PrepareContext, PreparedData, Samples, split_indices
from twinkle_core.data.shards import DEFAULT_SHARD_ROWS
from twinkle_core.data.spec import DataSpec
from twinkle_core.types import Fraction, PositiveInt
from twinkle_core.uris import filesystem, require_exists, suffix

LABEL_CANDIDATES = ("label", "target", "y", "class")
_MAX_ROWS_NAMED = 5


class RowsDataset(Dataset):
    """``(features, label)`` samples read lazily from (memory-mapped) arrays at the given row indices."""

    def __init__(self, features: np.ndarray, labels: np.ndarray, rows: np.ndarray, label_dtype: torch.dtype):
        """Wrap the arrays; nothing is copied until a sample is read."""
        self.features, self.labels, self.rows, self.label_dtype = features, labels, rows, label_dtype

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``i`` as float features and its label."""
        row = int(self.rows[i])
        x = torch.from_numpy(np.array(self.features[row], dtype=np.float32))
        return x, torch.tensor(self.labels[row], dtype=self.label_dtype)


class TabularRow:
    """One ``(features, label)`` sample from a shard's arrays (picklable, for loader workers)."""

    def __init__(self, label_dtype: torch.dtype) -> None:
        """Labels become ``label_dtype`` tensors."""
        self.label_dtype = label_dtype

    def __call__(self, arrays: dict[str, np.ndarray], i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``i`` of the shard as float features and its label."""
        x = torch.from_numpy(np.array(arrays["features"][i], dtype=np.float32))
        return x, torch.tensor(arrays["labels"][i], dtype=self.label_dtype)


class TabularProcessor(IndexedProcessor):
    """Rows of numeric features and one label column, from CSV or Parquet at any URI, or a Hugging Face dataset
    folder on this machine (``save_to_disk``'s or the Hub's Parquet layout: its train split; a ``ClassLabel`` label
    as its class names; ``twinkle_core.data.hf``).

    Features are every numeric column except the label (text columns are an error naming them: encode or
    drop them first). Classification labels may be text or numbers; they are mapped to class indices in
    sorted order. The split is deterministic for a seed and stratified for classification. Feature means and
    standard deviations of the training split travel in the ``DataSpec`` so algorithms can standardise
    inside the model (exports then take raw features).
    """

    task = "tabular_classification"
    formats = ("csv", "parquet", "pq", "idx", HF_FORMAT)
    index_kind = "tables"
    row_arrays = ("features", "labels")

    def __init__(
        self,
        task: str | None = None,
        label_column: str | None = None,
        val_fraction: Fraction = 0.2,
        use_mmap: bool = False,
        shard_rows: PositiveInt = DEFAULT_SHARD_ROWS,
    ) -> None:
        """Configure the processor.

        Args:
            task: ``tabular_classification`` (default) or ``tabular_regression``.
            label_column: the target column; by default the first of ``label``, ``target``, ``y``, ``class``.
            val_fraction: the share of rows held out for validation.
            use_mmap: memory-map an index file built by ``build_index`` instead of reading it whole.
            shard_rows: rows per shard when the plan streams the data in shards (data larger than memory).
        """
        super().__init__(task)
        self.label_column = label_column
        self.val_fraction = val_fraction
        self.use_mmap = use_mmap
        self.shard_rows = shard_rows

    @property
    def classification(self) -> bool:
        """Whether labels are classes (else numbers to regress)."""
        return self.task == "tabular_classification"

    # ------------------------------------------------------------------ reading
    def read_table(self, uri: str, data: bytes | None = None) -> pd.DataFrame:
        """Read the CSV or Parquet file at ``uri`` (or its bytes ``data``, already read).

        Raises:
            DataNotFoundError, EmptyDataError, UnsupportedFormatError: naming the file.
        """
        suffix = self.check_format(uri)
        if data is None:
            fs, path = require_exists(uri)
            data = fs.cat_file(path)
        try:
            with io.BytesIO(data) as handle:
                frame = pd.read_parquet(handle) if suffix in ("parquet", "pq") else pd.read_csv(handle)
        except pd.errors.EmptyDataError:
            raise EmptyDataError(f"data file '{uri}' is empty; it needs a header row and data rows") from None
        except (ValueError, OSError, pd.errors.ParserError) as err:
            raise DataError(f"cannot read '{uri}' as {suffix}: {err}") from err
        if frame.empty:
            raise EmptyDataError(f"data file '{uri}' has a header but no data rows")
        if suffix not in ("parquet", "pq"):
            self._check_header(data, uri)
        return frame

    @staticmethod
    def _check_header(data: bytes, uri: str) -> None:
        """Refuse duplicate column names (pandas would rename them silently to ``name.1``)."""
        import csv
        from collections import Counter

        first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
        names = Counter(n.strip() for n in next(csv.reader([first]), []))
        duplicates = sorted(n for n, count in names.items() if count > 1)
        if duplicates:
            raise DataError(
                f"the header of '{uri}' names column(s) {', '.join(repr(d) for d in duplicates)} more than once; "
                "rename or drop the duplicates (each column needs its own name)"
            )

    def decode(self, frame: pd.DataFrame, uri: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Validate ``frame`` and return float32 features, labels and facts (columns, classes).

        Raises:
            MissingColumnError, NonNumericError, MissingValueError, DataError: naming column and rows.
        """
        label = self._label_column(frame, uri)
        features = frame.drop(columns=[label])
        if features.shape[1] == 0:
            raise DataError(f"'{uri}' has only the label column '{label}'; it needs feature columns")
        x = self._numeric(features, uri)
        self._check_missing(frame[[label]], uri)
        facts: dict[str, Any] = {"feature_names": [str(c) for c in features.columns], "label_column": label}
        raw_labels = frame[label]
        if self.classification:
            classes = sorted(raw_labels.unique().tolist(), key=lambda v: (str(type(v)), v))
            if len(classes) < 2:
                raise DataError(f"label column '{label}' of '{uri}' has one class only ({classes[0]!r})")
            if len(classes) == len(raw_labels) > 2:
                raise DataError(
                    f"label column '{label}' of '{uri}' has a different value in each of its {len(raw_labels)} rows: "
                    "it looks like an id, not a class. Pass label_column=<the class column>, or use "
                    "task='tabular_regression' for a numeric target"
                )
            counts = raw_labels.value_counts()
            lonely = counts[counts < 2]
            if len(lonely):
                shown = ", ".join(repr(v) for v in lonely.index[:5]) + (" ..." if len(lonely) > 5 else "")
                raise DataError(
                    f"label column '{label}' of '{uri}' has {len(lonely)} class(es) with a single row ({shown}): a "
                    "validation split needs at least 2 rows per class. Add rows, merge those classes or drop them"
                )
            lookup = {value: i for i, value in enumerate(classes)}
            y = raw_labels.map(lookup).to_numpy(dtype=np.int64)
            facts["class_names"] = [str(c) for c in classes]
        else:
            numeric = pd.to_numeric(raw_labels, errors="coerce")
            if numeric.isna().any():
                row = int(np.flatnonzero(numeric.isna().to_numpy())[0])
                raise NonNumericError(
                    f"label column '{label}' of '{uri}' holds {raw_labels.iloc[row]!r} in data row {row + 1}; "
                    "regression needs numeric labels"
                )
            y = numeric.to_numpy(dtype=np.float32)
        return x, y, facts

    def _numeric(self, features: pd.DataFrame, uri: str) -> np.ndarray:
        """The feature columns as float32, or the named error for text, missing or infinite values."""
        features = features.copy()
        for column in features.columns:
            values = features[column]
            if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
                converted = pd.to_numeric(values, errors="coerce")
                bad = values[converted.isna() & values.notna()]
                if len(bad):
                    raise NonNumericError(
                        f"feature column '{column}' of '{uri}' holds text ({bad.iloc[0]!r} in data row "
                        f"{bad.index[0] + 1}); encode it as numbers or drop the column"
                    )
                features[column] = converted
        self._check_missing(features, uri)
        x = features.to_numpy(dtype=np.float32)
        if not np.isfinite(x).all():
            row, col = np.argwhere(~np.isfinite(x))[0]
            raise MissingValueError(
                f"feature column '{features.columns[col]}' of '{uri}' holds an infinite value in data row "
                f"{row + 1}; replace or drop it"
            )
        return x

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Read a CSV or Parquet table with the run's columns: its feature columns (any order; a missing or an extra
        one is a named error), and its label column if present — classes mapped as the run mapped them, rows of
        a class the run never saw left out and counted in ``details["unseen_classes"]``. Sample ids are data-row
        numbers (1-based, as error messages count them). ``targets=False``: every row, unlabelled.

        Raises:
            MissingColumnError: a feature column of the run is absent. DataError: columns the run did not train on,
                an empty table. NonNumericError, MissingValueError: as for training.
        """
        if is_hf_dataset(uri):  # a datasets folder: its test split (else validation, else train)
            frame, manifest, _ = self.read_hf(uri, evaluation=True)
            return self._samples(frame, spec, uri, f"md5:{manifest.md5}", targets)
        self._one_file(uri, *require_exists(uri))
        data, manifest = read_file(uri)
        return self._samples(self.read_table(uri, data), spec, uri, f"md5:{manifest.md5}", targets)

    def read_hf(self, uri: str, evaluation: bool = False) -> tuple[pd.DataFrame, Manifest, str]:
        """A Hugging Face dataset folder's training split (``evaluation``: its test split, else validation, else
        train) as a table — a ``ClassLabel`` label column as its class names —, the folder's manifest and the
        split's name.

        Raises:
            DataError, EmptyDataError: the folder's layout or split (``twinkle_core.data.hf``).
        """
        dataset = open_hf_dataset(uri)
        split = dataset.evaluation_split() if evaluation else dataset.split()
        frame = dataset.table(split).to_pandas()
        frame.columns = [str(c) for c in frame.columns]
        label = self.label_column if self.label_column in frame.columns else next(
            (c for c in frame.columns if c.lower() in LABEL_CANDIDATES), None)
        names = dataset.class_names(label) if label is not None else None
        if label is not None and names:  # the classes by name, as a CSV of the same data would hold them
            frame[label] = [names[int(i)] if i is not None and 0 <= int(i) < len(names) else None
                            for i in frame[label]]
        return frame, Reader(uri).manifest(), split

    def _one_file(self, uri: str, fs: Any, path: str) -> None:
        """Refuse a folder where one table is read (training, evaluation, prediction), naming the tables in it.

        Raises:
            DataError: ``uri`` is a folder.
        """
        if fs.isdir(path):
            tables = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)
                            if suffix(p) in ("csv", "parquet", "pq"))[:5]
            raise DataError(f"'{uri}' is a folder; {type(self).__name__} reads one CSV or Parquet file (or an index "
                            f"DataProcessor.build_index wrote): give the file's path"
                            + (f", e.g. '{uri.rstrip('/')}/{tables[0]}' (the folder holds {', '.join(tables)})"
                               if tables else ""))

    def preprocessing(self, spec: DataSpec) -> dict[str, Any]:
        """A table: the feature columns, in the model's order, as float32; the model standardises them itself."""
        return {"reader": "table", "columns": [str(n) for n in spec.extra.get("feature_names", ())],
                "label_column": spec.extra.get("label_column"), "dtype": "float32", "scaling": "inside the model"}

    def samples_from(self, items: Any, spec: DataSpec) -> Samples:
        """A ``pandas.DataFrame`` (or a list of row dicts) with the run's feature columns, as unlabelled samples."""
        frame = items if isinstance(items, pd.DataFrame) else pd.DataFrame(list(items))
        fingerprint = "md5:" + hashlib.md5(pd.util.hash_pandas_object(frame, index=False).values.tobytes()).hexdigest()
        return self._samples(frame.copy(), spec, "<in-memory rows>", fingerprint, False)

    def _samples(self, frame: pd.DataFrame, spec: DataSpec, uri: str, fingerprint: str, targets: bool) -> Samples:
        names = [str(n) for n in spec.extra.get("feature_names", ())]
        label = str(spec.extra.get("label_column", ""))
        frame.columns = [str(c) for c in frame.columns]
        if len(frame) == 0:
            raise EmptyDataError(f"'{uri}' has a header but no rows; give the rows to evaluate or predict")
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise MissingColumnError(
                f"'{uri}' lacks {len(missing)} feature column(s) the run trained on: {', '.join(missing[:8])}"
                f"{' ...' if len(missing) > 8 else ''}; add them (the run reads {len(names)} columns)")
        extra = [c for c in frame.columns if c not in names and c != label]
        if extra:
            raise DataError(
                f"'{uri}' has column(s) the run did not train on: {', '.join(extra[:8])}"
                f"{' ...' if len(extra) > 8 else ''}; drop them (the run's label column is '{label}')")
        x = self._numeric(frame[names], uri)
        ids = [str(i + 1) for i in range(len(frame))]
        details: dict[str, Any] = {"rows": int(len(frame))}
        if not targets or label not in frame.columns:
            return Samples(TensorDataset(torch.tensor(x)), False, fingerprint, uri, ids, details)
        self._check_missing(frame[[label]], uri)
        raw = frame[label]
        if self.classification:
            lookup = {name: i for i, name in enumerate(spec.class_names)}
            names_of = raw.map(str)
            y = names_of.map(lookup)
            unseen = names_of[y.isna()]
            if len(unseen):
                details["unseen_classes"] = {str(k): int(v) for k, v in unseen.value_counts().items()}
            keep = np.flatnonzero(y.notna().to_numpy())
            target = torch.tensor(y.to_numpy()[keep].astype(np.int64))
        else:
            numeric = pd.to_numeric(raw, errors="coerce")
            if numeric.isna().any():
                row = int(np.flatnonzero(numeric.isna().to_numpy())[0])
                raise NonNumericError(f"label column '{label}' of '{uri}' holds {raw.iloc[row]!r} in data row "
                                      f"{row + 1}; regression needs numeric labels")
            keep = np.arange(len(frame))
            target = torch.tensor(numeric.to_numpy(dtype=np.float32))
        details["scored_rows"] = int(len(keep))
        dataset = TensorDataset(torch.tensor(x[keep]), target)
        return Samples(dataset, True, fingerprint, uri, [ids[i] for i in keep], details)

    def _label_column(self, frame: pd.DataFrame, uri: str) -> str:
        columns = [str(c) for c in frame.columns]
        frame.columns = columns
        if self.label_column is not None:
            if self.label_column not in columns:
                raise MissingColumnError(
                    f"label column '{self.label_column}' is not in '{uri}'; its columns are "
                    f"{', '.join(columns)}. Pass label_column=<one of them>"
                )
            return self.label_column
        lowered = {c.lower(): c for c in columns}
        for candidate in LABEL_CANDIDATES:
            if candidate in lowered:
                return lowered[candidate]
        raise MissingColumnError(
            f"'{uri}' has no label column (looked for {', '.join(LABEL_CANDIDATES)}); its columns are "
            f"{', '.join(columns)}. Pass label_column=<name>"
        )

    @staticmethod
    def _check_missing(frame: pd.DataFrame, uri: str) -> None:
        missing = frame.isna()
        if missing.to_numpy().any():
            column = missing.any().idxmax()
            rows = (np.flatnonzero(missing[column].to_numpy()) + 1).tolist()
            shown = ", ".join(map(str, rows[:_MAX_ROWS_NAMED])) + (" ..." if len(rows) > _MAX_ROWS_NAMED else "")
            raise MissingValueError(
                f"column '{column}' of '{uri}' has {len(rows)} missing (NaN or empty) value(s) in data row(s) "
                f"{shown}; fill or drop them"
            )

    # ------------------------------------------------------------ preparation
    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read (or memory-map, or stream in shards) the table, validate it and split it deterministically.

        A CSV or Parquet file is read once: its bytes are parsed and fingerprinted from the same read.
        """
        context = self.context(context)
        seed = context.seed
        fs, path = require_exists(uri)
        hf = is_hf_dataset(uri)
        indexed = not hf and suffix(uri) not in ("csv", "parquet", "pq") and is_index(uri)  # tables: not peeked at
        if not indexed and not hf:
            self._one_file(uri, fs, path)
        if context.sharded:
            return self._prepare_sharded(uri, context, indexed)
        manifest = None
        if indexed:
            arrays, meta = read_index(uri, mmap=self.use_mmap)
            x, y, facts, fingerprint = arrays["features"], arrays["labels"], meta["facts"], meta["fingerprint"]
            self._check_index_task(meta, uri)
        elif hf:
            frame, manifest, split_name = self.read_hf(uri)
            x, y, facts = self.decode(frame, uri)
            fingerprint = f"md5:{manifest.md5}"
        else:
            data, manifest = read_file(uri)
            x, y, facts = self.decode(self.read_table(uri, data), uri)
            fingerprint = f"md5:{manifest.md5}"
        train_rows, val_rows = split_indices(len(y), self.val_fraction, seed, y if self.classification else None)
        label_dtype = torch.long if self.classification else torch.float32
        if self.use_mmap:
            train: Dataset = RowsDataset(x, y, train_rows, label_dtype)
            val: Dataset = RowsDataset(x, y, val_rows, label_dtype)
        else:
            xt = torch.tensor(np.asarray(x), dtype=torch.float32)
            yt = torch.tensor(np.asarray(y), dtype=label_dtype)
            train, val = TensorDataset(xt[train_rows], yt[train_rows]), TensorDataset(xt[val_rows], yt[val_rows])
        spec = self._spec(facts, int(x.shape[1]), x[train_rows], y[train_rows])
        details = {"rows": int(len(y)), "train_rows": int(len(train_rows)), "val_rows": int(len(val_rows)),
                   "index": indexed, **({"hf_split": split_name} if hf else {})}
        size = int(fs.du(path, total=True)) if hf else int(fs.size(path))
        return PreparedData(train, val, spec, fingerprint, uri, size, details, manifest=manifest)

    def _prepare_sharded(self, uri: str, context: PrepareContext, indexed: bool) -> PreparedData:
        """Stream the rows from an index file in shards (a CSV/Parquet source is decoded into one, once)."""
        seed = context.seed
        manifest = None
        if indexed:
            index = uri
        elif is_hf_dataset(uri):  # the training split decoded into an index once, as a CSV would be
            frame, manifest, _ = self.read_hf(uri)

            def build(url: str) -> None:
                x, y, facts = self.decode(frame, uri)
                write_index(url, {"features": x, "labels": y},
                            {"task": self.task, "facts": facts, "fingerprint": f"md5:{manifest.md5}", "source": uri})

            index = self.cached_index(context, f"{manifest.md5}-{self.task}-{self.label_column or 'auto'}.idx", build)
            del frame
        else:
            data, manifest = read_file(uri)

            def build(url: str) -> None:
                x, y, facts = self.decode(self.read_table(uri, data), uri)
                write_index(url, {"features": x, "labels": y},
                            {"task": self.task, "facts": facts, "fingerprint": f"md5:{manifest.md5}", "source": uri})

            index = self.cached_index(context, f"{manifest.md5}-{self.task}-{self.label_column or 'auto'}.idx", build)
            del data
        header, _ = index_header(index)
        meta = header["meta"]
        self._check_index_task(meta, index)
        y = read_array(index, "labels")
        train_rows, val_rows = split_indices(len(y), self.val_fraction, seed, y if self.classification else None)
        decode = TabularRow(torch.long if self.classification else torch.float32)
        train, val = self.sharded_splits(index, train_rows, val_rows, decode, decode, seed)
        sample = train.sample_arrays()  # statistics from evenly spaced training shards, not the whole data
        spec = self._spec(meta["facts"], int(header["arrays"]["features"]["shape"][1]), sample["features"],
                          sample["labels"])
        fs, path = filesystem(index)
        details = {"rows": int(len(y)), "train_rows": int(len(train_rows)), "val_rows": int(len(val_rows)),
                   "index": indexed, "sharded": True, "shards": len(train.shards), "shard_rows": self.shard_rows}
        return PreparedData(train, val, spec, meta["fingerprint"], uri, int(fs.size(path)), details,
                            manifest=manifest)

    def _check_index_task(self, meta: dict[str, Any], uri: str) -> None:
        if meta.get("task") != self.task:
            raise DataError(f"index '{uri}' was built for {meta.get('task')}, not {self.task}; rebuild it")

    def _spec(self, facts: dict[str, Any], features: int, train_x: Any, train_y: Any) -> DataSpec:
        """The data spec, with the training split's feature (and target) statistics."""
        train_x = np.asarray(train_x, dtype=np.float64)
        std = train_x.std(axis=0)
        extra = {
            "feature_names": facts["feature_names"],
            "label_column": facts["label_column"],
            "feature_mean": train_x.mean(axis=0).tolist(),
            "feature_std": np.where(std > 0, std, 1.0).tolist(),
        }
        if not self.classification:
            train_y = np.asarray(train_y, dtype=np.float64)
            extra["target_mean"], extra["target_std"] = float(train_y.mean()), float(train_y.std() or 1.0)
        class_names = tuple(facts.get("class_names", ()))
        return DataSpec(task=self.task, input_shape=(features,),
                        num_classes=len(class_names) if self.classification else None, class_names=class_names,
                        extra=extra)

    def write_index(self, src: str, dst: str) -> str:
        """Decode the table at ``src`` once into the index file ``dst``."""
        data, manifest = read_file(src)
        x, y, facts = self.decode(self.read_table(src, data), src)
        meta = {"task": self.task, "facts": facts, "fingerprint": f"md5:{manifest.md5}", "source": src}
        return write_index(dst, {"features": x, "labels": y}, meta)
