"""Every path Twinkle reads or writes goes through fsspec; this module maps our own URI schemes.

* any fsspec URL or plain path: ``data.csv``, ``file:///x``, ``memory://x``, ``s3://bucket/key`` (s3fs);
* ``nas://share/path`` → ``$TWINKLE_NAS_ROOT/share/path`` (a mounted network share, or any fsspec URL);
* ``twinkle://user/project/run-id[/file]`` and ``twinkle://models/<name>`` → inside the run store
  (``TWINKLE_HOME``); such a path can never escape the store.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
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


STORE_SCHEME = "twinkle://"
"""The scheme of paths inside the run store."""


def is_store_uri(uri: Any) -> bool:
    """Whether ``uri`` is a ``twinkle://`` path."""
    return str(uri).startswith(STORE_SCHEME)


@dataclass(frozen=True)
class StoreURI:
    """A ``twinkle://`` path, parsed once: ``twinkle://USER/PROJECT[/RUN[/FILE...]]`` (the article's
    ``twinkle://USER/projects/PROJECT/RUN`` too) or ``twinkle://models/NAME[/FILE...]``.

    Attributes:
        parts: the path's segments, the ``projects`` alias folded away.
    """

    parts: tuple[str, ...]

    @classmethod
    def parse(cls, uri: str) -> StoreURI:
        """Parse ``uri`` (``twinkle://...``, or a bare ``user/project/runN`` id), refusing anything that could
        escape the store.

        Raises:
            StorePathError: empty, absolute, ``..``, ``.`` or backslash segments; the message names the URI.
        """
        uri = str(uri) if is_store_uri(uri) else STORE_SCHEME + str(uri)
        rest = uri[len(STORE_SCHEME):]
        if not rest or rest.startswith("/") or "\\" in rest:
            raise StorePathError(
                f"'{uri}' is not a store path: write twinkle://USER/PROJECT/RUN or twinkle://models/NAME"
            )
        parts = rest.rstrip("/").split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise StorePathError(f"'{uri}' would leave the run store ('..', '.' or empty segments are not allowed)")
        if parts[0] != "models" and len(parts) >= 4 and parts[1] == "projects":  # twinkle://user/projects/x/run23
            parts = [parts[0], *parts[2:]]
        return cls(tuple(parts))

    @property
    def is_model(self) -> bool:
        """Whether it names a published model (``twinkle://models/...``)."""
        return self.parts[0] == "models"

    @property
    def owner(self) -> str | None:
        """The user a run path belongs to (``None`` for a published model)."""
        return None if self.is_model else self.parts[0]

    @property
    def run_id(self) -> str | None:
        """``user/project/runN`` when the path names exactly a run, else ``None``."""
        return "/".join(self.parts) if not self.is_model and len(self.parts) == 3 else None

    def layout(self) -> list[str]:
        """Its segments inside the store's folder (``runs/...`` or ``models/...``).

        Raises:
            StorePathError: a model without a name, or a run path without a project.
        """
        if self.is_model:
            if len(self.parts) < 2:
                raise StorePathError("twinkle://models/ needs a model name: twinkle://models/NAME")
            return list(self.parts)
        if len(self.parts) < 2:
            raise StorePathError("a store path names at least a user and a project: twinkle://USER/PROJECT[/RUN]")
        return ["runs", *self.parts]

    def __str__(self) -> str:
        """``twinkle://`` and the segments."""
        return STORE_SCHEME + "/".join(self.parts)


def store_owner(uri: Any) -> str | None:
    """The user a ``twinkle://`` run path belongs to; ``None`` for a published model, another scheme or a path that
    does not parse (access checks treat all three as nobody's)."""
    if not is_store_uri(uri):
        return None
    try:
        return StoreURI.parse(str(uri)).owner
    except StorePathError:
        return None


def run_uri(run_id: str) -> str:
    """The ``twinkle://`` URI of the run ``user/project/runN``."""
    return STORE_SCHEME + run_id


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
    if is_store_uri(uri):
        return join(home or twinkle_home(), *StoreURI.parse(uri).layout())
    return uri


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


HUB_HINT = ("nothing is downloaded at run time: fetch the dataset once where the network is allowed "
            "(huggingface-cli download --repo-type dataset NAME --local-dir DIR, or "
            "datasets.load_dataset(NAME).save_to_disk(DIR)) and pass DIR")
"""How to point at a Hugging Face Hub dataset: a local copy (said when ``hf://`` or a hub id is given)."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def filesystem(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it for ``uri`` (after ``resolve``).

    Raises:
        TwinkleError: an ``hf://`` URI (the Hugging Face Hub: nothing is downloaded; ``HUB_HINT`` says what to do).
    """
    if uri.lower().startswith(("hf://", "hf:")):
        raise TwinkleError(f"'{uri}' is on the Hugging Face Hub; {HUB_HINT}")
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
        hub = f"; if '{uri}' is a Hugging Face Hub dataset id, {HUB_HINT}" if _HUB_ID.match(uri) else ""
        raise DataNotFoundError(f"{what} '{uri}' does not exist; check the path (resolved to '{resolve(uri)}'){hub}")
    return fs, path


def size_of(uri: str) -> int:
    """Bytes at ``uri``: a file's size, or a folder's total (from listings; nothing is read)."""
    fs, path = require_exists(uri)
    return int(fs.du(path, total=True)) if fs.isdir(path) else int(fs.size(path))
