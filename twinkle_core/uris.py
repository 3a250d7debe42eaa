"""Every path Twinkle reads or writes goes through fsspec; this module maps our own URI schemes.

* any fsspec URL or plain path: ``data.csv``, ``file:///x``, ``memory://x``, ``s3://bucket/key`` (s3fs);
* ``nas://share/path`` → ``$TWINKLE_NAS_ROOT/share/path`` (a mounted network share, or any fsspec URL);
* ``twinkle://user/project/run-id[/file]`` and ``twinkle://models/<name>`` → inside the run store
  (``TWINKLE_HOME``); such a path can never escape the store.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

import fsspec

from twinkle_core.errors import TwinkleError


class DataNotFoundError(TwinkleError, FileNotFoundError):
    """A data file or folder does not exist."""


class StorePathError(TwinkleError, ValueError):
    """A ``twinkle://`` path is malformed or would escape the run store."""


def twinkle_home() -> str:
    """The run store's root: ``$TWINKLE_HOME`` (any fsspec URL), default ``~/.twinkle``."""
    home = os.environ.get("TWINKLE_HOME") or os.path.join(os.path.expanduser("~"), ".twinkle")
    return home.rstrip("/") or "/"


def store_parts(uri: str) -> list[str]:
    """The path segments of a ``twinkle://`` URI, refusing anything that could escape the store.

    Raises:
        StorePathError: empty, absolute, ``..``, ``.`` or backslash segments; the message names the URI.
    """
    rest = uri[len("twinkle://") :]
    if not rest or rest.startswith("/") or "\\" in rest:
        raise StorePathError(
            f"'{uri}' is not a store path: write twinkle://USER/PROJECT/RUN or twinkle://models/NAME"
        )
    parts = rest.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise StorePathError(f"'{uri}' would leave the run store ('..', '.' or empty segments are not allowed)")
    return parts


def join(base: str, *parts: str) -> str:
    """Join URL or path parts with '/' (fsspec URLs use '/' on every platform)."""
    return posixpath.join(base, *parts) if "://" in base else os.path.join(base, *parts)


def resolve(uri: str, home: str | None = None) -> str:
    """Map ``nas://`` and ``twinkle://`` URIs to plain fsspec URLs; leave others as they are.

    ``home``: the run store ``twinkle://`` paths live in (default ``twinkle_home``).

    Raises:
        TwinkleError: ``nas://`` without ``TWINKLE_NAS_ROOT``; StorePathError for bad store paths.
    """
    uri = str(uri)
    if uri.startswith("nas://"):
        root = os.environ.get("TWINKLE_NAS_ROOT")
        if not root:
            raise TwinkleError(
                f"'{uri}' is a nas:// path but TWINKLE_NAS_ROOT is not set; set it to the share's mount point "
                "(for example TWINKLE_NAS_ROOT=/mnt/nas)"
            )
        rel = uri[len("nas://") :].lstrip("/")
        if ".." in rel.split("/"):
            raise TwinkleError(f"'{uri}' would leave TWINKLE_NAS_ROOT; remove the '..' segments")
        return join(root, rel)
    if uri.startswith("twinkle://"):
        return join(home or twinkle_home(), *_store_layout(store_parts(uri)))
    return uri


def _store_layout(parts: list[str]) -> list[str]:
    if parts[0] == "models":
        if len(parts) < 2:
            raise StorePathError("twinkle://models/ needs a model name: twinkle://models/NAME")
        return ["models", *parts[1:]]
    if len(parts) >= 4 and parts[1] == "projects":  # the article's twinkle://user/projects/x/run23
        parts = [parts[0], *parts[2:]]
    if len(parts) < 2:
        raise StorePathError("a store path names at least a user and a project: twinkle://USER/PROJECT[/RUN]")
    return ["runs", *parts]


def is_local(fs: Any) -> bool:
    """Whether an fsspec filesystem is this machine's disk."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols


def local_cache_dir() -> str:
    """``$XDG_CACHE_HOME/twinkle`` (default ``~/.cache/twinkle``): local files kept for remote stores."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "twinkle")


def suffix(uri: str) -> str:
    """The lower-case file extension of ``uri``'s last segment, without the dot ("" when it has none)."""
    name = str(uri).rstrip("/").rsplit("/", 1)[-1]
    return name.rpartition(".")[2].lower() if "." in name else ""


def filesystem(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it for ``uri`` (after ``resolve``)."""
    fs, path = fsspec.core.url_to_fs(resolve(uri))
    return fs, path


def require_exists(uri: str, what: str = "data") -> tuple[Any, str]:
    """Like ``filesystem``, raising ``DataNotFoundError`` naming ``uri`` when nothing is there."""
    try:
        fs, path = filesystem(uri)
        exists = fs.exists(path)
    except TwinkleError:
        raise
    except (ImportError, ValueError) as err:
        raise TwinkleError(f"cannot open {what} '{uri}': {err}") from err
    if not exists:
        raise DataNotFoundError(f"{what} '{uri}' does not exist; check the path (resolved to '{resolve(uri)}')")
    return fs, path


def size_of(uri: str) -> int:
    """Bytes at ``uri``: a file's size, or a folder's total (from listings; nothing is read)."""
    fs, path = require_exists(uri)
    return int(fs.du(path, total=True)) if fs.isdir(path) else int(fs.size(path))
