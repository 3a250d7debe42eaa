"""Index files: decoded arrays in one file that can be memory-mapped, for fast repeated reads.

Layout: the magic ``TWKLIDX1``, a little-endian ``uint64`` header length, a UTF-8 JSON header
``{"arrays": {name: {"dtype", "shape", "offset"}}, "meta": {...}}``, then each array's raw bytes at its
offset (64-byte aligned). Written atomically (a temporary name, then a rename).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Mapping

import numpy as np

from twinkle_core.data.errors import DataError
from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.uris import filesystem, is_local, require_exists

MAGIC = b"TWKLIDX1"
_ALIGN = 64


def is_index(uri: str) -> bool:
    """Whether ``uri`` is an existing file that starts with the index magic."""
    try:
        fs, path = filesystem(uri)
        if not fs.isfile(path):
            return False
        with fs.open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except (OSError, ValueError):
        return False


def write_index(uri: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> str:
    """Write ``arrays`` and JSON-ready ``meta`` to the index file ``uri``; returns ``uri``."""
    entries: dict[str, dict[str, Any]] = {}
    offset = 0
    contiguous = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    for name, array in contiguous.items():
        entries[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"arrays": entries, "meta": dict(meta)}).encode("utf-8")
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    blob = bytearray(start + offset)
    blob[: len(MAGIC)] = MAGIC
    blob[len(MAGIC) : len(MAGIC) + 8] = struct.pack("<Q", len(header))
    blob[len(MAGIC) + 8 : len(MAGIC) + 8 + len(header)] = header
    for name, array in contiguous.items():
        begin = start + entries[name]["offset"]
        blob[begin : begin + array.nbytes] = array.tobytes()
    atomic_write_bytes(uri, bytes(blob))
    return uri


def index_header(uri: str) -> tuple[dict[str, Any], int]:
    """The JSON header of an index file (``{"arrays": ..., "meta": ...}``) and where its array bytes start;
    reads only the header.

    Raises:
        DataError: the file is not an index; the message names it.
    """
    fs, path = require_exists(uri, "index")
    with fs.open(path, "rb") as handle:
        head = handle.read(len(MAGIC) + 8)
        if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
            raise DataError(f"'{uri}' is not a Twinkle index file; build one with DataProcessor.build_index")
        (length,) = struct.unpack("<Q", head[len(MAGIC) :])
        header = json.loads(handle.read(length).decode("utf-8"))
    return header, -(-(len(MAGIC) + 8 + length) // _ALIGN) * _ALIGN


def read_index(uri: str, mmap: bool = True) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and meta of an index file; memory-mapped when ``mmap`` and the file is local.

    Raises:
        DataError: the file is not an index or is truncated; the message names it.
    """
    header, start = index_header(uri)
    fs, path = require_exists(uri, "index")
    size = fs.size(path)
    raw = None if (mmap and is_local(fs)) else fs.cat_file(path)
    arrays = {}
    for name, entry in header["arrays"].items():
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        begin = start + entry["offset"]
        if begin + int(np.prod(shape)) * dtype.itemsize > size:
            raise DataError(f"index '{uri}' is truncated (array '{name}'); rebuild it with build_index")
        if raw is None:
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", offset=begin, shape=shape)
        else:
            arrays[name] = np.frombuffer(raw, dtype=dtype, count=int(np.prod(shape)), offset=begin).reshape(shape)
    return arrays, header["meta"]


def read_array(uri: str, name: str) -> np.ndarray:
    """One array of an index file, read with a single byte-range read (the rest of the file is not read).

    Raises:
        DataError: the file is not an index, has no such array, or is truncated.
    """
    header, start = index_header(uri)
    entry = header["arrays"].get(name)
    if entry is None:
        raise DataError(f"index '{uri}' has no array '{name}'; rebuild it with build_index")
    dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    fs, path = filesystem(uri)
    raw = fs.cat_file(path, start=start + entry["offset"], end=start + entry["offset"] + nbytes)
    if len(raw) < nbytes:
        raise DataError(f"index '{uri}' is truncated (array '{name}'); rebuild it with build_index")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)
