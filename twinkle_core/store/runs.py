"""``RunStore``: where runs live — a catalogue plus each run's folder of artefacts.

Layout under ``TWINKLE_HOME`` (any fsspec URL; default ``~/.twinkle``):

```text
catalogue.sqlite                       (for a local home; see below)
runs/<user>/<project>/run<N>/          plan.json, data.json, logs/metrics.csv, curves.png,
                                       checkpoints/{best,last}.ckpt, exports/, evaluations/<N>/,
                                       predictions/<N>/
models/<name>/                         published models (model.json + files)
```

SQLite needs a local file: when ``TWINKLE_HOME`` is remote (``s3://...``) the catalogue lives at
``$TWINKLE_CATALOGUE`` or, by default, in ``$XDG_CACHE_HOME/twinkle/``.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import time
from typing import Any

from twinkle_core.errors import TwinkleError
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.store.catalogue import Catalogue, RunRecord, RunStatus
from twinkle_core.uris import StoreURI, filesystem, is_local, is_store_uri, join, local_cache_dir, resolve, twinkle_home


class RunNotFoundError(TwinkleError, LookupError):
    """No run in the catalogue matches a ``twinkle://`` URI or run id."""


def default_user() -> str:
    """``$TWINKLE_USER``, else the login name."""
    try:
        return os.environ.get("TWINKLE_USER") or getpass.getuser()
    except Exception:  # no login name in some containers
        return "user"


class RunStore:
    """The run store at ``home`` (default ``$TWINKLE_HOME``, else ``~/.twinkle``)."""

    def __init__(self, home: str | None = None) -> None:
        """Open the store and its catalogue (created on first use)."""
        self.home = home or twinkle_home()
        self.catalogue = Catalogue(self._catalogue_path())

    def _catalogue_path(self) -> str:
        if os.environ.get("TWINKLE_CATALOGUE"):
            return os.environ["TWINKLE_CATALOGUE"]
        fs, path = filesystem(self.home)
        if is_local(fs):
            return os.path.join(path, "catalogue.sqlite")
        digest = hashlib.md5(self.home.encode()).hexdigest()[:12]
        return os.path.join(local_cache_dir(), f"catalogue-{digest}.sqlite")

    def resolve(self, uri: str) -> str:
        """``uri`` with a ``twinkle://`` path mapped into this store (other URIs unchanged)."""
        return resolve(uri, self.home) if is_store_uri(uri) else str(uri)

    # ------------------------------------------------------------------ runs
    def create_run(self, user: str | None, project: str | None, **values: Any) -> RunRecord:
        """Add a run (status ``running``) and create its folder."""
        record = self.catalogue.create(user or default_user(), project or "default", **values)
        fs, path = filesystem(self.run_dir(record.id))
        fs.makedirs(path, exist_ok=True)
        return record

    def update(self, run_id: str, **values: Any) -> RunRecord:
        """Update catalogue columns of ``run_id``."""
        return self.catalogue.update(run_id, **values)

    def end_run(self, run_id: str, status: RunStatus, error: str | BaseException | None = None,
                only_running: bool = False) -> RunRecord | None:
        """End the run ``run_id`` as ``status`` (``failed``, ``stopped``, ...) now, with ``error`` — an exception is
        written ``Type: message``. With ``only_running``, a run that is not running is left as it is (``None``)."""
        if only_running:
            current = self.catalogue.get(run_id)
            if current is None or current.status != RunStatus.RUNNING:
                return None
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        return self.update(run_id, status=status, error=error, finished=time.time())

    def run_dir(self, run_id: str) -> str:
        """The fsspec URL of a run's folder."""
        return join(self.home, "runs", *run_id.split("/"))

    def path(self, run_id: str, *parts: str) -> str:
        """The fsspec URL of a file inside a run's folder."""
        return join(self.run_dir(run_id), *parts)

    def last_checkpoint(self, run_id: str) -> str | None:
        """The URL of the run's ``last.ckpt`` when it has written one (what a restart resumes from)."""
        url = self.path(run_id, "checkpoints", "last.ckpt")
        fs, path = filesystem(url)
        return url if fs.exists(path) else None

    def write_json(self, run_id: str, name: str, data: Any) -> str:
        """Write ``data`` as JSON into the run's folder, atomically; returns its URL."""
        url = self.path(run_id, name)
        atomic_write_text(url, json.dumps(data, indent=2, default=str) + "\n")
        return url

    def next_folder(self, run_id: str, kind: str) -> tuple[int, str]:
        """The number and URL of the run's next numbered folder of ``kind`` (``evaluations/<N>/``,
        ``predictions/<N>/``; counting from 1). Nothing is created."""
        fs, path = filesystem(self.path(run_id, kind))
        taken = [int(name.rstrip("/").rsplit("/", 1)[-1]) for name in (fs.ls(path, detail=False) if fs.exists(path)
                                                                        else [])
                 if name.rstrip("/").rsplit("/", 1)[-1].isdigit()]
        number = max(taken, default=0) + 1
        return number, self.path(run_id, kind, str(number))

    def evaluations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's evaluations (each ``evaluations/<N>/evaluation.json``), in order."""
        fs, path = filesystem(self.path(run_id, "evaluations"))
        if not fs.exists(path):
            return []
        found = []
        for name in fs.ls(path, detail=False):
            number = name.rstrip("/").rsplit("/", 1)[-1]
            record = f"{name.rstrip('/')}/evaluation.json"
            if number.isdigit() and fs.exists(record):
                found.append(json.loads(fs.cat_file(record)))
        return sorted(found, key=lambda e: int(e.get("number", 0)))

    def get(self, ref: str) -> RunRecord:
        """The run named by ``twinkle://user/project/runN`` (or ``user/project/runN``).

        Raises:
            RunNotFoundError: no such run; the message lists the project's runs.
        """
        run_id = self.run_id(ref)
        record = self.catalogue.get(run_id)
        if record is None:
            user, project, _ = run_id.split("/")
            known = [r.run for r in self.catalogue.find(user=user, project=project)]
            raise RunNotFoundError(
                f"no run '{ref}' in the store at {self.home}; runs of {user}/{project}: "
                f"{', '.join(known) or 'none'} (see 'twinkle runs list')"
            )
        return record

    def run_id(self, ref: str) -> str:
        """``user/project/runN`` from a run URI or id (refusing paths that escape the store)."""
        run_id = StoreURI.parse(ref).run_id
        if run_id is None:
            raise RunNotFoundError(f"'{ref}' does not name a run: write twinkle://USER/PROJECT/RUN")
        return run_id

    def list(self, user: str | None = None, project: str | None = None) -> list[RunRecord]:
        """Runs, newest first, optionally of one user and project."""
        return list(self.catalogue.find(user=user, project=project))

    def history(self, algorithm: str, fingerprint: str, hardware: str) -> list[RunRecord]:
        """Finished runs of ``algorithm`` on the same data and hardware, newest first."""
        return [
            r for r in self.catalogue.find(algorithm=algorithm, data_fingerprint=fingerprint, hardware=hardware)
            if r.status == "finished" and r.measured
        ]

    # ---------------------------------------------------------------- models
    def publish(self, ref: str, name: str) -> str:
        """Copy a run's best checkpoint and exports to ``twinkle://models/<name>``; returns that URI."""
        record = self.get(ref)
        if not record.best_checkpoint:
            raise TwinkleError(f"run {record.uri} has no checkpoint to publish; train it to the end first")
        target = join(self.home, *StoreURI.parse(f"models/{name}").layout())
        fs, path = filesystem(target)
        fs.makedirs(path, exist_ok=True)
        src_fs, src = filesystem(record.best_checkpoint)
        if src_fs.isdir(src):  # a sharded checkpoint folder: copied as a folder of the same name
            for file in src_fs.find(src):
                fs.pipe_file(join(path, "model.ckpt", file[len(src):].lstrip("/")), src_fs.cat_file(file))
        else:
            fs.pipe_file(join(path, "model.ckpt"), src_fs.cat_file(src))
        atomic_write_text(
            join(target, "model.json"),
            json.dumps({"run": record.uri, "algorithm": record.algorithm, "task": record.task,
                        "metrics": record.metrics, "exports": record.exports}, indent=2),
        )
        return str(StoreURI.parse(f"models/{name}"))
