"""Atomic writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import BinaryIO, Iterator

from twinkle_core.uris import filesystem, is_local


def atomic_write_bytes(uri: str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``uri`` atomically.

    Local files are written to a temporary file in the same folder, flushed to disk and renamed over the
    target. Object stores (s3, ...) publish an object only when its upload completes, so one ``pipe`` is
    already atomic there. ``mode``: the local file's permissions less the umask, as ``open`` gives them
    (``0o666`` for a file others may read); ``None`` keeps the temporary file's owner-only ``0o600``.
    """
    with atomic_writer(uri, mode) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_writer(uri: str, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary handle whose contents replace ``uri`` atomically when the block ends without an error (see
    ``atomic_write_bytes``): for a writer that streams (``torch.save(state, handle)``), so that a large file is
    not first built whole in memory. An error inside the block leaves ``uri`` as it was."""
    fs, path = filesystem(uri)
    if not is_local(fs):
        buffer = io.BytesIO()
        yield buffer
        parent = path.rsplit("/", 1)[0]
        if parent and parent != path:
            fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(path, buffer.getvalue())
        return
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=folder)
    if mode is not None:
        os.fchmod(fd, mode & ~_umask())
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(uri: str, text: str, mode: int | None = None) -> None:
    """Write UTF-8 ``text`` to ``uri`` atomically (see ``atomic_write_bytes``, and its ``mode``)."""
    atomic_write_bytes(uri, text.encode("utf-8"), mode)


def _umask() -> int:
    """This process's umask, read without changing it where Linux shows it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)  # elsewhere: read by setting it, and put straight back
    os.umask(current)
    return current
