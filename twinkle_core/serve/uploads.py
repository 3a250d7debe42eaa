"""Data uploads: a user without shared storage sends a file or an archive (``.zip``, ``.tar``, ``.tar.gz``,
``.tgz``) to ``PUT /api/v1/uploads/{name}``; it lands in ``<home>/uploads/<user>/`` — a data root of that user
alone — and its server-side path is what the user's jobs take as ``data``.

The body is streamed to disk and cut off at the server's ``max_upload_bytes`` (413). Archives are unpacked
without trusting a single member: no absolute paths, no ``..``, no links or device files, and no more bytes
unpacked than the upload cap allows (a zip bomb stops there). Nothing from an upload is ever executed.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
from typing import Any

from twinkle_core.errors import TwinkleError

UPLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""An upload's name: letters, digits, ``.``, ``_`` and ``-`` (it names a file or folder)."""
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
"""Suffixes that are unpacked into a folder of the upload's stem."""


class UploadTooLarge(TwinkleError):
    """The upload is larger (or unpacks larger) than the server allows."""


def uploads_dir(home: str, user: str) -> str:
    """``<home>/uploads/<user>``: the user's own data root."""
    return os.path.join(os.path.realpath(home), "uploads", user)


def target_name(name: str) -> str:
    """What an upload named ``name`` becomes: the archive's stem (a folder), else the file's name.

    Raises:
        TwinkleError: the name is not allowed.
    """
    if not UPLOAD_NAME.match(name) or name in (".", ".."):
        raise TwinkleError(f"upload name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (up to 100)")
    for suffix in ARCHIVES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


async def receive(stream: Any, folder: str, limit: int) -> tuple[str, int]:
    """Write the request body ``stream`` (async bytes) to a temporary file in ``folder``, piece by piece;
    returns its path and size.

    Raises:
        UploadTooLarge: more than ``limit`` bytes arrived (the partial file is removed).
    """
    from starlette.concurrency import run_in_threadpool

    os.makedirs(folder, exist_ok=True)
    handle, path = tempfile.mkstemp(prefix=".upload-", dir=folder)
    size = 0
    try:
        with os.fdopen(handle, "wb") as out:
            async for chunk in stream:
                size += len(chunk)
                if size > limit:
                    raise UploadTooLarge(f"the upload is larger than this server's limit of {limit} bytes")
                await run_in_threadpool(out.write, chunk)
    except BaseException:
        os.remove(path)
        raise
    return path, size


def place(received: str, name: str, folder: str, limit: int) -> str:
    """Move (or unpack) a received upload to its place in ``folder``, replacing an earlier one of the same
    name; returns its path."""
    target = os.path.join(folder, target_name(name))
    staging = tempfile.mkdtemp(prefix=".staging-", dir=folder)
    try:
        lower = name.lower()
        if lower.endswith(".zip"):
            _unzip(received, staging, limit)
        elif lower.endswith(ARCHIVES):
            _untar(received, staging, limit)
        ready = staging if lower.endswith(ARCHIVES) else received
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.remove(target)
        os.replace(ready, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if os.path.exists(received):
            os.remove(received)
    return target


def _member_path(root: str, name: str) -> str:
    parts = name.replace("\\", "/").split("/")
    if name.startswith("/") or any(p == ".." for p in parts) or ":" in parts[0]:
        raise TwinkleError(f"the archive member {name!r} would be written outside its folder; refused")
    return os.path.join(root, *[p for p in parts if p not in ("", ".")])


def _unzip(path: str, root: str, limit: int) -> None:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise TwinkleError(f"the upload is not a readable zip archive: {err}") from None
    total = 0
    with archive:
        for info in archive.infolist():
            target = _member_path(root, info.filename)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise TwinkleError(f"the archive member {info.filename!r} is a link; refused")
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(info) as source, open(target, "wb") as out:
                while chunk := source.read(1 << 20):
                    total += len(chunk)
                    if total > limit:
                        raise UploadTooLarge(f"the archive unpacks to more than this server's limit of {limit} bytes")
                    out.write(chunk)


def _untar(path: str, root: str, limit: int) -> None:
    try:
        archive = tarfile.open(path)
    except tarfile.TarError as err:
        raise TwinkleError(f"the upload is not a readable tar archive: {err}") from None
    with archive:
        members = archive.getmembers()
        if sum(m.size for m in members if m.isfile()) > limit:
            raise UploadTooLarge(f"the archive unpacks to more than this server's limit of {limit} bytes")
        for member in members:
            _member_path(root, member.name)
            if not (member.isfile() or member.isdir()):
                raise TwinkleError(f"the archive member {member.name!r} is not a plain file or folder; refused")
        archive.extractall(root, filter="data")  # the standard library's own checks as well


def list_uploads(home: str, user: str) -> list[dict[str, Any]]:
    """The user's uploads: name, server-side path, kind, bytes."""
    folder = uploads_dir(home, user)
    if not os.path.isdir(folder):
        return []
    found = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        size = os.path.getsize(path) if os.path.isfile(path) else sum(
            os.path.getsize(os.path.join(base, f)) for base, _, files in os.walk(path) for f in files)
        found.append({"name": name, "data": path, "kind": "file" if os.path.isfile(path) else "folder",
                      "bytes": size})
    return found
