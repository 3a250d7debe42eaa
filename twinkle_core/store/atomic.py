"""Atomic writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import os
import tempfile

from twinkle_core.uris import filesystem, is_local


def atomic_write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri`` atomically.

    Local files are written to a temporary file in the same folder, flushed to disk and renamed over the
    target. Object stores (s3, ...) publish an object only when its upload completes, so one ``pipe`` is
    already atomic there.
    """
    fs, path = filesystem(uri)
    if not is_local(fs):
        parent = path.rsplit("/", 1)[0]
        if parent and parent != path:
            fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(path, data)
        return
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(uri: str, text: str) -> None:
    """Write UTF-8 ``text`` to ``uri`` atomically (see ``atomic_write_bytes``)."""
    atomic_write_bytes(uri, text.encode("utf-8"))
