"""What the service reads back from the run store for a job: its log, its metric rows, its run's artefacts and
published models — every path checked to stay inside the folder it belongs to."""

from __future__ import annotations

import csv
import json
import os
from typing import Any

from twinkle_core.engine.curves import HISTORY
from twinkle_core.jobs.folder import JobFolder
from twinkle_core.jobs.spec import job_dir


class UnsafePathError(ValueError):
    """A requested file path that would leave its folder."""


def job_log_path(home: str, job_id: str) -> str:
    """The job's ``log.txt``."""
    return os.path.join(job_dir(home, job_id), JobFolder.LOG)


def read_log(home: str, job_id: str, offset: int = 0, limit: int = 1 << 16) -> tuple[str, int]:
    """Up to ``limit`` bytes of the job's log from byte ``offset``, cut at the last whole line; returns the
    text and the offset after it."""
    path = job_log_path(home, job_id)
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, offset))
            chunk = handle.read(limit)
    except FileNotFoundError:
        return "", offset
    if len(chunk) == limit and b"\n" in chunk:
        chunk = chunk[: chunk.rindex(b"\n") + 1]
    return chunk.decode("utf-8", errors="replace"), offset + len(chunk)


def metric_rows(logs_dir: str) -> list[dict[str, Any]]:
    """Every metric row of a run so far: earlier attempts' rows (a restarted run), then the current ones;
    numbers as floats, empty cells left out."""
    rows: list[dict[str, Any]] = []
    for name in (HISTORY, "metrics.csv"):
        try:
            with open(os.path.join(logs_dir, name), encoding="utf-8", newline="") as handle:
                for row in csv.DictReader(handle):
                    rows.append({k: _number(v) for k, v in row.items() if k and v not in ("", None)})
        except (FileNotFoundError, csv.Error, UnicodeDecodeError):
            continue
    return rows


def metrics_version(logs_dir: str) -> tuple[tuple[int, int] | None, ...]:
    """What ``metric_rows`` would read, in a word: each metric file's size and modification time (``None``
    for a missing one). Equal versions, equal rows — a reader polling for new rows need not parse them again."""
    version: list[tuple[int, int] | None] = []
    for name in (HISTORY, "metrics.csv"):
        try:
            found = os.stat(os.path.join(logs_dir, name))
            version.append((found.st_size, found.st_mtime_ns))
        except OSError:
            version.append(None)
    return tuple(version)


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def safe_file(folder: str, relative: str) -> str:
    """The file ``relative`` inside ``folder``, refusing ``..``, absolute paths and links that lead out.

    Raises:
        UnsafePathError: the path leaves ``folder``.
        FileNotFoundError: no such file.
    """
    parts = relative.replace("\\", "/").split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise UnsafePathError(relative)
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath([root, target]) != root:
        raise UnsafePathError(relative)
    if not os.path.isfile(target):
        raise FileNotFoundError(relative)
    return target


def list_files(folder: str) -> list[dict[str, Any]]:
    """Every file under ``folder`` (relative path and size), links that lead out left out."""
    root = os.path.realpath(folder)
    found = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            real = os.path.realpath(path)
            if os.path.commonpath([root, real]) != root:
                continue
            found.append({"path": os.path.relpath(path, root).replace(os.sep, "/"), "bytes": os.path.getsize(real)})
    return found


def published_models(home: str) -> list[dict[str, Any]]:
    """Every published model (``models/<name>/model.json``) with its name."""
    root = os.path.join(home, "models")
    models = []
    for base, _dirs, files in os.walk(root):
        if "model.json" in files:
            try:
                with open(os.path.join(base, "model.json"), encoding="utf-8") as handle:
                    info = json.load(handle)
            except (OSError, json.JSONDecodeError):
                continue
            models.append({"name": os.path.relpath(base, root).replace(os.sep, "/"), **info})
    return sorted(models, key=lambda m: m["name"])
