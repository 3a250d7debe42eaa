"""Content fingerprints of data, so that every run records exactly what it trained on.

* a file: the MD5 of its bytes;
* a folder: the MD5 of the text made of one line per file, sorted by relative path:
  ``<relative path>\\t<size in bytes>\\t<MD5 of content>\\n``.

Both are written ``md5:<hex>``; ``md5_of`` returns the bare hex digest.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from typing import Any

from twinkle_core.uris import require_exists

_CHUNK = 1 << 20


def _file_md5(fs: Any, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Manifest:
    """Every file of some data with its size and MD5, keyed by path relative to the data's root.

    Attributes:
        files: relative path → (size in bytes, MD5 hex).
        single_file: whether the data is one file (its fingerprint is then that file's MD5).
    """

    files: dict[str, tuple[int, str]]
    single_file: bool = False

    @property
    def md5(self) -> str:
        """The documented fingerprint (see the module docstring), as bare hex."""
        if self.single_file:
            return next(iter(self.files.values()))[1]
        lines = "".join(f"{rel}\t{size}\t{md5}\n" for rel, (size, md5) in sorted(self.files.items()))
        return hashlib.md5(lines.encode("utf-8")).hexdigest()


class Reader:
    """Reads the files of a data source (a file or a folder) once each, keeping their size and MD5, so the
    processor's reads give the source's ``Manifest`` without a second pass.

    For example:

    ```python
    reader = Reader(uri)
    frames = [pd.read_csv(io.BytesIO(reader.read(path))) for path in reader.files(".csv")]
    manifest = reader.manifest()   # reads only the files the processor did not (a README, say)
    ```
    """

    def __init__(self, uri: str) -> None:
        """Open ``uri`` (nothing is read yet)."""
        self.uri = uri
        self.fs, self.path = require_exists(uri)
        self.folder = bool(self.fs.isdir(self.path))
        self._seen: dict[str, tuple[int, str]] = {}

    def files(self, *suffixes: str) -> list[str]:
        """The source's file paths (sorted), optionally only those ending in ``suffixes`` (case-insensitive)."""
        paths = sorted(self.fs.find(self.path)) if self.folder else [self.path]
        return [p for p in paths if not suffixes or p.lower().endswith(tuple(x.lower() for x in suffixes))]

    def read(self, path: str) -> bytes:
        """The bytes of ``path`` (one of ``files``), fingerprinted as they are read."""
        data = self.fs.cat_file(path)
        self._seen[path] = (len(data), hashlib.md5(data).hexdigest())
        return data

    def manifest(self, exclude: tuple[str, ...] = ()) -> Manifest:
        """The documented manifest of the whole source; files not read yet are read for it now."""
        if not self.folder:
            entry = self._seen.get(self.path) or (int(self.fs.size(self.path)), _file_md5(self.fs, self.path))
            return Manifest({self.path.rsplit("/", 1)[-1]: entry}, single_file=True)
        root = self.path.rstrip("/") + "/"
        files = {}
        for file_path in self.files():
            rel = file_path[len(root):] if file_path.startswith(root) else file_path
            if any(fnmatch.fnmatch(rel, pattern) for pattern in exclude):
                continue
            files[rel] = self._seen.get(file_path) or (int(self.fs.size(file_path)), _file_md5(self.fs, file_path))
        return Manifest(files)


def read_file(uri: str) -> tuple[bytes, Manifest]:
    """The bytes of the file ``uri`` and its ``Manifest``, from one read (parse the bytes, keep the
    fingerprint: the data is read once)."""
    reader = Reader(uri)
    data = reader.read(reader.path)
    return data, reader.manifest()


def scan(uri: str, exclude: tuple[str, ...] = ()) -> Manifest:
    """Read every file under ``uri`` (or the file ``uri``) and return its ``Manifest``.

    ``exclude`` holds glob patterns of relative paths to leave out (caches a library writes into the data).
    """
    fs, path = require_exists(uri)
    if not fs.isdir(path):
        return Manifest({path.rsplit("/", 1)[-1]: (int(fs.size(path)), _file_md5(fs, path))}, single_file=True)
    root = path.rstrip("/") + "/"
    files = {}
    for file_path in sorted(fs.find(path)):
        rel = file_path[len(root) :] if file_path.startswith(root) else file_path
        if any(fnmatch.fnmatch(rel, pattern) for pattern in exclude):
            continue
        files[rel] = (int(fs.size(file_path)), _file_md5(fs, file_path))
    return Manifest(files)


def md5_of(uri: str, exclude: tuple[str, ...] = ()) -> str:
    """The documented MD5 of a file's bytes or of a folder's manifest (see the module docstring)."""
    return scan(uri, exclude).md5


def data_fingerprint(uri: str, exclude: tuple[str, ...] = ()) -> str:
    """``md5:<hex>`` of ``md5_of`` — what runs record as their data fingerprint."""
    return f"md5:{md5_of(uri, exclude)}"
