"""The service's SQLite connections: autocommit, rows by name, WAL, a long busy timeout (many processes write)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


def create(path: str, schema: str) -> None:
    """Create the database file (and its folder) in WAL mode, with ``schema``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(schema)


@contextmanager
def connect(path: str) -> Iterator[sqlite3.Connection]:
    """A connection to ``path``, closed afterwards."""
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout=60000")
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        yield conn
    finally:
        conn.close()
