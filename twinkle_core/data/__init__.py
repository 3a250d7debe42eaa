"""The public data API: what a data processor (core's or a plugin's) is written with.

Everything a processor needs is importable from here, and a plugin should import nothing else of the data
layer (CI holds first-party plugins to that with import-linter):

```python
from twinkle_core.data import DataProcessor, DataSpec, PreparedData, data_fingerprint, require_exists
```

* the contract: ``DataProcessor``, ``PrepareContext`` (what the run tells ``prepare``), ``PreparedData``,
  ``DataSpec``, ``ModelInput`` (what the model wants from its input: size, normalisation, interpolation);
* paths (fsspec, with Twinkle's ``nas://`` and ``twinkle://`` schemes): ``filesystem``,
  ``require_exists``, ``join``, ``is_local``, ``suffix``;
* fingerprints: ``data_fingerprint``, ``scan``, ``Manifest``, ``read_file`` (bytes and
  fingerprint from one read) and ``Reader`` (the same for a folder's files): set
  ``PreparedData.manifest`` and the data is read once per fit;
* splitting: ``split_indices``; index files: ``write_index``, ``read_index``, ``is_index``,
  ``index_header``, ``read_array``;
* sharded loading (data larger than memory, when ``PrepareContext.sharded`` says so):
  ``ShardedRows``, ``DEFAULT_SHARD_ROWS``; ``IndexedProcessor``, the base of processors that read their data
  decoded in memory, memory-mapped from an index or streamed from one (a source's cached index, the two
  sharded splits);
* writing: ``atomic_write_bytes``, ``atomic_write_text`` (never a half-written file);
* caches: ``DataProcessor.cache_dir`` (inside the store the run uses), ``local_cache_dir``;
* errors: ``DataError`` and its subclasses, ``DataNotFoundError``.

Names are imported on first access, so importing one submodule stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    "DataProcessor": "twinkle_core.data.processor",
    "IndexedProcessor": "twinkle_core.data.indexed",
    "PreparedData": "twinkle_core.data.processor",
    "PrepareContext": "twinkle_core.data.processor",
    "Samples": "twinkle_core.data.processor",
    "split_indices": "twinkle_core.data.processor",
    "DataSpec": "twinkle_core.data.spec",
    "ModelInput": "twinkle_core.data.spec",
    "Manifest": "twinkle_core.data.fingerprint",
    "data_fingerprint": "twinkle_core.data.fingerprint",
    "scan": "twinkle_core.data.fingerprint",
    "read_file": "twinkle_core.data.fingerprint",
    "Reader": "twinkle_core.data.fingerprint",
    "ShardedRows": "twinkle_core.data.shards",
    "DEFAULT_SHARD_ROWS": "twinkle_core.data.shards",
    "index_header": "twinkle_core.data.index",
    "read_array": "twinkle_core.data.index",
    "is_index": "twinkle_core.data.index",
    "read_index": "twinkle_core.data.index",
    "write_index": "twinkle_core.data.index",
    "HF_FORMAT": "twinkle_core.data.hf",
    "HFDataset": "twinkle_core.data.hf",
    "is_hf_dataset": "twinkle_core.data.hf",
    "open_hf_dataset": "twinkle_core.data.hf",
    "DataError": "twinkle_core.data.errors",
    "EmptyDataError": "twinkle_core.data.errors",
    "MissingColumnError": "twinkle_core.data.errors",
    "MissingValueError": "twinkle_core.data.errors",
    "NonNumericError": "twinkle_core.data.errors",
    "SamplesNotSupportedError": "twinkle_core.data.errors",
    "UnsupportedFormatError": "twinkle_core.data.errors",
    "DataNotFoundError": "twinkle_core.uris",
    "filesystem": "twinkle_core.uris",
    "require_exists": "twinkle_core.uris",
    "join": "twinkle_core.uris",
    "is_local": "twinkle_core.uris",
    "suffix": "twinkle_core.uris",
    "local_cache_dir": "twinkle_core.uris",
    "atomic_write_bytes": "twinkle_core.store.atomic",
    "atomic_write_text": "twinkle_core.store.atomic",
}

if TYPE_CHECKING:  # pragma: no cover
    from twinkle_core.data.errors import (
        DataError,
        EmptyDataError,
        MissingColumnError,
        MissingValueError,
        NonNumericError,
        SamplesNotSupportedError,
        UnsupportedFormatError,
    )
    from twinkle_core.data.fingerprint import Manifest, Reader, data_fingerprint, read_file, scan
    from twinkle_core.data.hf import HF_FORMAT, HFDataset, is_hf_dataset, open_hf_dataset
    from twinkle_core.data.index import index_header, is_index, read_array, read_index, write_index
    from twinkle_core.data.indexed import IndexedProcessor
    from twinkle_core.data.shards import DEFAULT_SHARD_ROWS, ShardedRows
    from twinkle_core.data.processor import DataProcessor, PrepareContext, PreparedData, Samples, split_indices
    from twinkle_core.data.spec import DataSpec, ModelInput
    from twinkle_core.store.atomic import atomic_write_bytes, atomic_write_text
    from twinkle_core.uris import DataNotFoundError, filesystem, is_local, join, local_cache_dir, require_exists, suffix


def __getattr__(name: str) -> Any:
    """Import a public name on first access."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'twinkle_core.data' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = sorted(_PUBLIC)
