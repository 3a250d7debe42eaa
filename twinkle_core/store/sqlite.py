"""``Database``: one SQLite file shared by many threads and processes — a connection per thread, opened once
and reused (opening one, with its pragmas, costs more than a query), autocommit, rows by name, a long busy timeout.

A connection is never carried into another process (a forked child opens its own) nor kept for a file that was
replaced meanwhile (``twinkle runs repair`` swaps the catalogue): both are checked on every use, for the price of
one ``stat``. (Only a rollback-journal file may be replaced so: a WAL file's ``-wal`` beside it belongs to the old
one.)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_INHERITED: list[sqlite3.Connection] = []
# connections a forked child inherited: kept referenced, never used or closed (closing another process's
# connection can disturb its locks, https://www.sqlite.org/howtocorrupt.html#_carrying_an_open_database_connection_across_a_fork_)


class Database:
    """The SQLite file at ``path``, created (with its folder and ``schema``) on first use.

    Args:
        path: the database file.
        schema: SQL run once when the file is opened (``CREATE ... IF NOT EXISTS``).
        wal: put the file in write-ahead-log mode (readers never wait for a writer; needs a local disk).
        timeout: seconds a statement waits for another writer's lock before ``database is locked``.
    """

    def __init__(self, path: str, schema: str = "", *, wal: bool = True, timeout: float = 60.0) -> None:
        """Create the file (and folder) and run ``schema`` in it."""
        self.path = path
        self.schema = schema
        self.wal = wal
        self.timeout = timeout
        self._local = threading.local()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with self.connect():
            pass

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            if self.wal:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            if self.schema:
                conn.executescript(self.schema)
        except BaseException:
            conn.close()
            raise
        return conn

    def _thread_connection(self) -> sqlite3.Connection:
        local = self._local
        held = getattr(local, "held", None)
        try:
            inode: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            inode = None
        if held is not None:
            conn, pid, opened_inode = held
            if pid == os.getpid() and opened_inode == inode:
                return conn
            if pid != os.getpid():
                _INHERITED.append(conn)
            else:
                conn.close()  # the file was replaced: this connection reads the old one
        conn = self._open()
        local.held = (conn, os.getpid(), os.stat(self.path).st_ino)
        return conn

    def version(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """What identifies the database's content as ``conn`` (this thread's connection) sees it: it changes
        whenever a commit changed it — another connection's or process's (``PRAGMA data_version``) or this
        connection's own (its ``total_changes``) — so a result derived from it may be kept until then."""
        return conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection; a transaction the block opened and left open (it raised) is rolled back on
        the way out — one that was open before it (a ``write`` block around it) is left to its owner."""
        conn = self._thread_connection()
        outer = conn.in_transaction
        try:
            yield conn
        finally:
            if conn.in_transaction and not outer:
                conn.rollback()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement (``BEGIN IMMEDIATE``):
        committed when the block ends, rolled back when it raises."""
        with self.connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends or the object is dropped)."""
        held = getattr(self._local, "held", None)
        if held is not None and held[1] == os.getpid():
            held[0].close()
        self._local.held = None
