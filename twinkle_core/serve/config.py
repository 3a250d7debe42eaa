"""``ServerConfig``: how ``twinkle serve`` runs — where, for whom, with how many workers and which limits —
and ``check_data_uri``, the allowlist every job's data URI must pass.

Secure by default: the server binds ``127.0.0.1`` and asks for a token; binding any other address with auth
off is refused. A job's data must lie under one of the configured data roots (a local folder, followed through
symlinks, or a URI prefix such as ``s3://team-data/``) and never in the run store itself, so a job cannot read
another user's runs or any other file of the server.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from twinkle_core.errors import TwinkleError
from twinkle_core.uris import DataNotFoundError, StorePathError, StoreURI, is_store_uri, store_owner


class DataAccessError(TwinkleError, PermissionError):
    """A job's data URI is outside what the server lets jobs read."""


STORE_FOLDERS = ("runs", "models", "jobs", "serve", "cache", "manifests", "uploads")
"""Folders of the run store no job may read as data (other users' runs, the server's own state)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MAX_DEFAULT_API_PROCESSES = 4
"""The most API processes ``twinkle serve`` starts unless told (``--api-processes``)."""


class ServerConfig(BaseModel):
    """Settings of one ``twinkle serve`` (every ``twinkle serve`` option)."""

    model_config = ConfigDict(extra="forbid")

    home: str = Field(description="the run store the server's jobs write to")
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    auth: bool = Field(default=True, description="token auth; off only on a loopback address")
    workers: int | None = Field(default=None, ge=0, le=256, description="local worker processes (None: the plan's)")
    lease_seconds: float = Field(default=30.0, gt=0.5, description="a worker that misses this long loses its job")
    grace_seconds: float = Field(default=30.0, ge=0, description="after SIGTERM, before SIGKILL")
    poll_seconds: float = Field(default=1.0, gt=0)
    data_roots: list[str] = Field(default_factory=list, description="where jobs may read data (paths or URI prefixes)")
    max_running_per_user: int | None = Field(default=None, ge=1)
    max_queued_per_user: int | None = Field(default=100, ge=1)
    max_wall_clock_seconds: float | None = Field(default=None, gt=0, description="the cap on any job's running time")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="the largest request body accepted")
    max_upload_bytes: int = Field(default=1 << 30, ge=1024, description="the largest data upload (and what it unpacks to)")
    ray_address: str | None = Field(default=None, description="hand jobs with backend='ray' to this Ray cluster")
    training_nice: int = Field(default=10, ge=0, le=19, description="the scheduling priority the workers and their "
                               "training run at, below the API's (0: the same): the API answers while every core trains")
    api_processes: int | None = Field(default=None, ge=1, le=64, description="processes answering the API and the "
                                      "dashboard on one socket (None: one per core, at most 4)")
    fresh_processes: bool = Field(default=False, description="start each job in a new interpreter (it sees code "
                                  "upgraded while the server runs) instead of forking it from a template process "
                                  "that imported the Trainer once (starts in under a second)")
    tinker: bool = Field(default=False, description="serve the Tinker-compatible training API at /tinker (one API "
                                                    "process: its models live in it)")
    tinker_backend: str = Field(default="llm", description="the training backend the Tinker API runs on")
    tinker_models: dict[str, str] = Field(default_factory=dict,
                                          description="base models the Tinker API offers: name → local folder")
    tinker_max_models_per_user: int = Field(default=8, ge=1, description="training models one user may have loaded")
    tinker_idle_seconds: float | None = Field(default=600.0, gt=0, description="a Tinker model idle this long is "
                                              "written out of memory (and loaded back when next used)")
    tinker_max_requests_per_minute: int | None = Field(default=None, ge=1,
                                                       description="Tinker submissions one user may make a minute")
    tinker_session_seconds: float | None = Field(
        default=120.0, gt=0, description="a Tinker session without a heartbeat or request this long is ended: its "
                                         "models' states are saved as checkpoint 'session-expired' and unloaded")
    tinker_report_to: list[str] = Field(default_factory=list, description="experiment trackers every Tinker "
                                        "training model's run reports to (mlflow, tensorboard, wandb), configured by "
                                        "their own environment variables in the server's")

    @field_validator("tinker_report_to")
    @classmethod
    def _trackers(cls, value: list[str]) -> list[str]:
        from twinkle_core.tracking import check_report_to

        return check_report_to(value)

    @model_validator(mode="after")
    def _secure(self) -> ServerConfig:
        if not self.auth and not is_loopback(self.host):
            raise TwinkleError(f"refusing to serve {self.host} without auth: anyone who reaches it could run jobs; "
                               "turn auth on (add users with 'twinkle users add NAME') or bind 127.0.0.1")
        return self

    def api_process_count(self) -> int:
        """How many processes answer the API: one with ``tinker``, else ``api_processes``, else one per core, at
        most ``MAX_DEFAULT_API_PROCESSES``."""
        if self.tinker:  # the Tinker API's models and futures live in the process that answers it
            return 1
        if self.api_processes is not None:
            return self.api_processes
        return max(1, min(MAX_DEFAULT_API_PROCESSES, os.cpu_count() or 1))

    @property
    def db_path(self) -> str:
        """The service's SQLite database (jobs, users, audit), inside the store's ``serve/`` folder."""
        return os.path.join(self.state_dir, "service.sqlite")

    @property
    def state_dir(self) -> str:
        """The server's own folder: database, locks and worker logs."""
        if "://" in self.home:
            raise TwinkleError(f"twinkle serve needs a local run store for its job table; {self.home} is remote "
                               "(give --home a local folder)")
        return os.path.join(os.path.abspath(self.home), "serve")

    def roots(self) -> list[str]:
        """The data roots, local ones made absolute and resolved (a default: ``<home>/datasets``)."""
        roots = self.data_roots or [os.path.join(os.path.abspath(self.home), "datasets")]
        return [r if "://" in r and not r.startswith("file://") else os.path.realpath(r.removeprefix("file://"))
                for r in roots]

    def public(self) -> dict[str, Any]:
        """What the API tells a client about the server (no paths of the server's own files)."""
        return {"auth": self.auth, "data_roots": self.roots(), "max_running_per_user": self.max_running_per_user,
                "max_queued_per_user": self.max_queued_per_user, "max_wall_clock_seconds": self.max_wall_clock_seconds,
                "max_body_bytes": self.max_body_bytes, "max_upload_bytes": self.max_upload_bytes,
                "ray": bool(self.ray_address)}


def check_data_uri(uri: str, config: ServerConfig, user: str | None = None) -> str:
    """``uri`` as the job will read it, when it is under a data root (or ``user``'s uploads) and outside the
    run store.

    Raises:
        DataAccessError: naming the URI, why, and the roots that are allowed.
    """
    roots = config.roots()
    allowed = ", ".join(roots)
    if any(ord(c) < 32 for c in uri) or "\\" in uri:
        raise DataAccessError(f"data {uri!r} has control characters or backslashes; give a plain path or URI")
    parts = urlsplit(uri)
    local = not parts.scheme or parts.scheme == "file" or (len(parts.scheme) == 1 and os.name == "nt")
    if not local:
        if parts.scheme == "twinkle":
            raise DataAccessError(f"data {uri!r} points into the run store; jobs read data from the data roots: "
                                  f"{allowed}")
        segments = parts.path.split("/")
        if ".." in segments or "." in segments:
            raise DataAccessError(f"data {uri!r} has '.' or '..' segments; write the URI without them")
        normal = uri.rstrip("/")
        for root in roots:
            if "://" in root and (normal == root.rstrip("/") or normal.startswith(root.rstrip("/") + "/")):
                return uri
        raise DataAccessError(f"data {uri!r} is not under a data root of this server; allowed: {allowed}")
    path = parts.path if parts.scheme == "file" else uri
    if ".." in path.split("/"):  # even one that stays inside a root: the path a job names is the path it reads
        raise DataAccessError(f"data {uri!r} has a '..' segment; write the path without it, under one of: {allowed}")
    if not os.path.isabs(path):
        raise DataAccessError(f"data {uri!r} is a relative path; give an absolute path under one of: {allowed}")
    real = os.path.realpath(path)  # symlinks followed: a link inside a root that points out of it is refused
    store = os.path.realpath(config.home)
    if user is not None and _inside(real, os.path.join(store, "uploads", user)):  # the user's own uploads
        if not os.path.exists(real):
            raise DataNotFoundError(f"data {uri!r} is not among your uploads (GET /api/v1/uploads lists them)")
        return real
    private = [os.path.join(store, name) for name in STORE_FOLDERS]
    for root in roots:
        if "://" not in root and _inside(real, root):
            if any(_inside(real, folder) for folder in private) or real == os.path.join(store, "catalogue.sqlite"):
                raise DataAccessError(f"data {uri!r} is inside the server's run store (runs, models, jobs); jobs "
                                      f"read data from: {allowed}")
            if not os.path.exists(real):
                raise TwinkleError(f"data {uri!r} does not exist on the server (check the path under {root})")
            return real
    raise DataAccessError(f"data {uri!r} is not under a data root of this server; allowed: {allowed}")


def check_hyperparameter_uris(hyperparams: dict[str, Any], config: ServerConfig, user: str) -> None:
    """Every hyperparameter value that names a file or URI (``weights="/..."``, ``weights="twinkle://..."``)
    must be one ``user`` may read: under a data root or their uploads, or a run or published model of theirs.

    Raises:
        DataAccessError: naming the key and the value.
    """
    for key, value in hyperparams.items():
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        items = [inner for item in items for inner in (item.values() if isinstance(item, dict) else [item])]
        for item in items:
            if not isinstance(item, str) or not _looks_like_a_path(item):
                continue
            if is_store_uri(item):
                if _own_store_uri(item, config, user):
                    continue
                raise DataAccessError(f"hyperparameter {key}={item!r} is not a run or model of yours; a job reads only "
                                      f"{user}'s runs and published models")
            try:
                check_data_uri(item, config, user)
            except TwinkleError as err:
                raise DataAccessError(f"hyperparameter {key}: {err}") from None


def _looks_like_a_path(text: str) -> bool:
    return text.startswith(("/", "~", "./", "../", "file:")) or "://" in text


def _own_store_uri(uri: str, config: ServerConfig, user: str) -> bool:
    """Whether ``twinkle://user/...`` is ``user``'s run, or ``twinkle://models/NAME`` a model of one of them."""
    import json

    try:
        parsed = StoreURI.parse(uri)
    except StorePathError:
        return False
    if not parsed.is_model:
        return parsed.owner == user
    info = os.path.join(os.path.realpath(config.home), *parsed.parts, "model.json")
    try:
        with open(info, encoding="utf-8") as handle:
            run = json.load(handle).get("run", "")
    except (OSError, ValueError):
        return False
    return store_owner(run) == user


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False
