"""Content fingerprints of data, so that every run records exactly what it trained on.

* a file: the MD5 of its bytes;
* a folder: the MD5 of the text made of one line per file, sorted by relative path:
  ``<relative path>\\t<size in bytes>\\t<MD5 of content>\\n``.

Both are written ``md5:<hex>``; :func:`md5_of` returns the bare hex digest.
"""

from __future__ import annotations

import hashlib
from typing import Any

from twinkle_core.uris import require_exists

_CHUNK = 1 << 20


def _file_md5(fs: Any, path: str) -> str:
    digest = hashlib.md5()
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_manifest(uri: str) -> dict[str, tuple[int, str]]:
    """Relative path → (size, MD5) for every file under folder ``uri`` (or the single file ``uri``)."""
    fs, path = require_exists(uri)
    if not fs.isdir(path):
        return {path.rsplit("/", 1)[-1]: (int(fs.size(path)), _file_md5(fs, path))}
    root = path.rstrip("/") + "/"
    manifest = {}
    for file_path in sorted(fs.find(path)):
        rel = file_path[len(root) :] if file_path.startswith(root) else file_path
        manifest[rel] = (int(fs.size(file_path)), _file_md5(fs, file_path))
    return manifest


def md5_of(uri: str) -> str:
    """The documented MD5 of a file's bytes or of a folder's manifest (see the module docstring)."""
    fs, path = require_exists(uri)
    if not fs.isdir(path):
        return _file_md5(fs, path)
    lines = "".join(f"{rel}\t{size}\t{md5}\n" for rel, (size, md5) in sorted(folder_manifest(uri).items()))
    return hashlib.md5(lines.encode("utf-8")).hexdigest()


def data_fingerprint(uri: str) -> str:
    """``md5:<hex>`` of :func:`md5_of` — what runs record as their data fingerprint."""
    return f"md5:{md5_of(uri)}"
