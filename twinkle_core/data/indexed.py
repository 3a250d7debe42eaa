"""``IndexedProcessor``: the skeleton shared by processors whose data decodes into an index file.

Such a processor (core's tabular one, twinkle-vision's image folders) reads its data one of three ways: decoded
into memory, memory-mapped from an index file (``DataProcessor.build_index``), or streamed from one in shards
when the data is larger than memory (``PrepareContext.sharded``). What differs between them is how a source is
decoded and how a row becomes a sample; what they share lives here:

* ``cached_index`` — the index a source is decoded into once, in the store's cache (keyed by what the caller
  names: the source's fingerprint and whatever changes the decoding), built only when it is not there yet;
* ``sharded_splits`` — the training split streamed shuffled and padded (every rank takes the same steps), the
  validation split in order.

```python
class MyProcessor(IndexedProcessor):
    index_kind = "things"                    # the cache folder: <home>/cache/things/
    row_arrays = ("things", "labels")        # the index arrays one sample reads
```
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np

from twinkle_core.data.processor import DataProcessor, PrepareContext
from twinkle_core.data.shards import DEFAULT_SHARD_ROWS, RowDecoder, ShardedRows
from twinkle_core.uris import filesystem


class IndexedProcessor(DataProcessor):
    """A ``DataProcessor`` whose data decodes into an index file (see the module docstring).

    Attributes:
        index_kind: the cache folder its decoded copies go to (``<home>/cache/<index_kind>/``).
        row_arrays: the names of the index arrays one sample reads (``("features", "labels")``).
        shard_rows: rows per shard when streaming (subclasses usually take it as a parameter).
    """

    index_kind: ClassVar[str] = "indexes"
    row_arrays: ClassVar[tuple[str, ...]] = ()
    shard_rows: int = DEFAULT_SHARD_ROWS

    def cached_index(self, context: PrepareContext, name: str, build: Callable[[str], Any]) -> str:
        """The index file ``name`` in the cache folder of ``index_kind`` (in the store ``context`` names),
        written by ``build(url)`` when it is not there yet; returns its URI. ``name`` must change whenever
        the decoding would (the source's fingerprint, the settings that shape the arrays)."""
        url = context.cache_dir(self.index_kind, name)
        fs, path = filesystem(url)
        if not fs.exists(path):
            build(url)
        return url

    def sharded_splits(self, index: str, train_rows: np.ndarray, val_rows: np.ndarray, train_row: RowDecoder,
                       val_row: RowDecoder, seed: int) -> tuple[ShardedRows, ShardedRows]:
        """The two splits of ``index`` streamed in shards of ``shard_rows``: training shuffled each epoch and
        padded (so that every rank and loader worker takes the same number of steps), validation in order."""
        train = ShardedRows(index, train_rows, self.row_arrays, train_row, seed=seed, shuffle=True, pad=True,
                            shard_rows=self.shard_rows)
        val = ShardedRows(index, val_rows, self.row_arrays, val_row, seed=seed, shuffle=False, pad=False,
                          shard_rows=self.shard_rows)
        return train, val
