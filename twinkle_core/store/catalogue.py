"""The SQLite catalogue of runs: one row per run, JSON columns for structured values."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from twinkle_core.errors import TwinkleError
from twinkle_core.store.sqlite import Database
from twinkle_core.types import TextEnum
from twinkle_core.uris import run_uri

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    project TEXT NOT NULL,
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    algorithm TEXT NOT NULL,
    task TEXT NOT NULL,
    hyperparams TEXT NOT NULL DEFAULT '{}',
    plan TEXT NOT NULL DEFAULT '{}',
    data_uri TEXT,
    data_fingerprint TEXT,
    hardware TEXT,
    status TEXT NOT NULL,
    metrics TEXT NOT NULL DEFAULT '{}',
    measured TEXT NOT NULL DEFAULT '{}',
    best_checkpoint TEXT,
    exports TEXT NOT NULL DEFAULT '[]',
    alerts TEXT NOT NULL DEFAULT '[]',
    parent TEXT,
    mode TEXT,
    error TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS runs_history ON runs (algorithm, data_fingerprint, hardware, status);
"""

_JSON = ("hyperparams", "plan", "metrics", "measured", "exports", "alerts")
class RunStatus(TextEnum):
    """Where a run is: ``running`` (or killed while running), ``finished``, ``failed`` (an error), ``stopped``
    (an alert or budget rule stopped it; resumable), ``interrupted`` (killed, then resumed as another run),
    ``recovered`` (rebuilt from its folder by ``twinkle runs repair``)."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    RECOVERED = "recovered"


STATUSES = tuple(status.value for status in RunStatus)
"""Every run status, as text."""


@dataclass
class RunRecord:
    """One catalogue row. ``id`` is ``user/project/runN``; JSON columns are Python values here."""

    id: str
    user: str
    project: str
    run: str
    seq: int
    algorithm: str
    task: str
    status: RunStatus
    created: float
    updated: float
    hyperparams: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    data_uri: str | None = None
    data_fingerprint: str | None = None
    hardware: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)
    best_checkpoint: str | None = None
    exports: list[Any] = field(default_factory=list)
    alerts: list[Any] = field(default_factory=list)
    parent: str | None = None
    mode: str | None = None
    error: str | None = None
    finished: float | None = None

    @property
    def uri(self) -> str:
        """``twinkle://user/project/runN``."""
        return run_uri(self.id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values, with ``uri``."""
        return {**asdict(self), "uri": self.uri}


class CatalogueError(TwinkleError):
    """The catalogue database cannot be read (damaged, or not a catalogue)."""


class Catalogue:
    """Access to the catalogue database at ``path`` (created on first use)."""

    def __init__(self, path: str) -> None:
        """Open (and if needed create) the database.

        Raises:
            CatalogueError: the file is damaged or not a SQLite database; the message says how to recover.
        """
        self.path = path
        try:
            # the rollback journal, not WAL: 'twinkle runs repair' moves a damaged file aside whole
            self.db = Database(path, _SCHEMA, wal=False, timeout=30)
            with self.db.connect() as db:
                db.execute("SELECT COUNT(*) FROM runs").fetchone()
        except sqlite3.DatabaseError as err:
            raise CatalogueError(
                f"the run catalogue '{path}' is damaged ({err}); the runs' folders are intact: rebuild it with "
                "'twinkle runs repair' (the damaged file is kept beside it)"
            ) from None

    def restore(self, row: dict[str, Any]) -> None:
        """Insert a run exactly as given (its id and number included), replacing one with the same id."""
        encoded = {k: json.dumps(v) if k in _JSON else v for k, v in row.items()}
        with self.db.connect() as db:
            db.execute(
                f"INSERT OR REPLACE INTO runs ({', '.join(encoded)}) VALUES ({', '.join('?' for _ in encoded)})",
                tuple(encoded.values()),
            )

    def create(self, user: str, project: str, **values: Any) -> RunRecord:
        """Insert a new run numbered after the project's last one; returns its record."""
        now = time.time()
        with self.db.write() as db:
            (last,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM runs WHERE user = ? AND project = ?", (user, project)
            ).fetchone()
            seq = int(last) + 1
            row = {
                "id": f"{user}/{project}/run{seq}", "user": user, "project": project, "run": f"run{seq}",
                "seq": seq, "status": "running", "created": now, "updated": now, **values,
            }
            encoded = {k: json.dumps(v) if k in _JSON else v for k, v in row.items()}
            db.execute(
                f"INSERT INTO runs ({', '.join(encoded)}) VALUES ({', '.join('?' for _ in encoded)})",
                tuple(encoded.values()),
            )
        return self.get(row["id"])  # type: ignore[return-value]

    def update(self, run_id: str, **values: Any) -> RunRecord:
        """Set columns of run ``run_id`` (JSON columns take Python values)."""
        values["updated"] = time.time()
        encoded = {k: json.dumps(v) if k in _JSON else v for k, v in values.items()}
        with self.db.connect() as db:
            db.execute(
                f"UPDATE runs SET {', '.join(f'{k} = ?' for k in encoded)} WHERE id = ?",
                (*encoded.values(), run_id),
            )
        record = self.get(run_id)
        assert record is not None, run_id
        return record

    def get(self, run_id: str) -> RunRecord | None:
        """The run ``user/project/runN``, or ``None``."""
        with self.db.connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def find(self, **where: Any) -> Iterator[RunRecord]:
        """Runs whose columns equal ``where`` (``None`` values are ignored), newest first."""
        clauses = {k: v for k, v in where.items() if v is not None}
        sql = "SELECT * FROM runs"
        if clauses:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in clauses)
        sql += " ORDER BY created DESC, seq DESC"
        with self.db.connect() as db:
            rows = db.execute(sql, tuple(clauses.values())).fetchall()
        return (_record(r) for r in rows)


def _record(row: sqlite3.Row) -> RunRecord:
    values = {k: (json.loads(row[k]) if k in _JSON and row[k] is not None else row[k]) for k in row.keys()}
    return RunRecord(**{**values, "status": RunStatus(values["status"])})
