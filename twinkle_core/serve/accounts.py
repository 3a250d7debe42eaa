"""``Accounts``: where the service keeps its users, their tokens' digests, browser sessions and the audit log
(SQLite, beside the job table). How tokens, sessions and CSRF tokens are made and checked is
``twinkle_core.serve.security``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

from twinkle_core.errors import TwinkleError
from twinkle_core.serve.security import (
    SESSION_SECONDS,
    User,
    digest,
    new_csrf_token,
    new_session_id,
    new_token,
    same_secret,
)
from twinkle_core.store.sqlite import Database

USER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
"""A user name: lower-case letters, digits, ``_`` and ``-``, starting with a letter (it names a store folder)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    id_sha256 TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    csrf TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    user TEXT NOT NULL,
    action TEXT NOT NULL,
    job TEXT,
    client TEXT,
    detail TEXT
);
"""


class Accounts:
    """Users, sessions and the audit log in the SQLite file ``path``."""

    def __init__(self, path: str) -> None:
        """Open (and create) the tables."""
        self.path = path
        self.db = Database(path, _SCHEMA)

    # ------------------------------------------------------------------ users
    def add_user(self, name: str, admin: bool = False) -> str:
        """Add ``name`` and return its new token (shown once; only its hash is kept).

        Raises:
            TwinkleError: the name is not a valid user name, or the user exists.
        """
        if not USER_NAME.match(name):
            raise TwinkleError(f"user name {name!r} is not allowed: use 1–32 lower-case letters, digits, '_' or '-', "
                               "starting with a letter")
        token = new_token()
        try:
            with self.db.connect() as conn:
                conn.execute("INSERT INTO users (name, token_sha256, admin, created) VALUES (?, ?, ?, ?)",
                             (name, digest(token), int(admin), time.time()))
        except sqlite3.IntegrityError:
            raise TwinkleError(f"user {name!r} exists; give them a new token with 'twinkle users token {name}'") \
                from None
        return token

    def new_token(self, name: str) -> str:
        """Replace ``name``'s token (the old one stops working); returns the new one."""
        token = new_token()
        with self.db.connect() as conn:
            changed = conn.execute("UPDATE users SET token_sha256 = ? WHERE name = ?", (digest(token), name)).rowcount
            conn.execute("DELETE FROM sessions WHERE user = ?", (name,))
        if not changed:
            raise TwinkleError(f"no user {name!r}; add one with 'twinkle users add {name}'")
        return token

    def remove_user(self, name: str) -> None:
        """Remove ``name`` (their jobs and runs stay)."""
        with self.db.connect() as conn:
            conn.execute("DELETE FROM users WHERE name = ?", (name,))
            conn.execute("DELETE FROM sessions WHERE user = ?", (name,))

    def users(self) -> list[dict[str, Any]]:
        """Every user (name, admin, created) — never a token."""
        with self.db.connect() as conn:
            return [{"name": r["name"], "admin": bool(r["admin"]), "created": r["created"]}
                    for r in conn.execute("SELECT name, admin, created FROM users ORDER BY name")]

    def by_token(self, token: str) -> User | None:
        """The user holding ``token``, or ``None``."""
        if not token or len(token) > 200:
            return None
        with self.db.connect() as conn:
            found = conn.execute("SELECT name, admin FROM users WHERE token_sha256 = ?", (digest(token),)).fetchone()
        return User(found["name"], bool(found["admin"])) if found else None

    # ------------------------------------------------------------------ browser sessions
    def open_session(self, user: User) -> str:
        """A new session id for ``user`` (the cookie's value)."""
        session = new_session_id()
        with self.db.connect() as conn:
            conn.execute("DELETE FROM sessions WHERE expires < ?", (time.time(),))
            conn.execute("INSERT INTO sessions (id_sha256, user, csrf, expires) VALUES (?, ?, ?, ?)",
                         (digest(session), user.name, new_csrf_token(), time.time() + SESSION_SECONDS))
        return session

    def by_session(self, session: str) -> User | None:
        """The user of a live session id (with its CSRF token), or ``None``."""
        if not session or len(session) > 200:
            return None
        with self.db.connect() as conn:
            found = conn.execute(
                "SELECT s.user, s.csrf, u.admin FROM sessions s JOIN users u ON u.name = s.user "
                "WHERE s.id_sha256 = ? AND s.expires >= ?", (digest(session), time.time())).fetchone()
        return User(found["user"], bool(found["admin"]), found["csrf"]) if found else None

    def close_session(self, session: str) -> None:
        """Log a session out."""
        with self.db.connect() as conn:
            conn.execute("DELETE FROM sessions WHERE id_sha256 = ?", (digest(session),))

    @staticmethod
    def csrf_ok(user: User, given: str | None) -> bool:
        """Whether a form's CSRF token is the session's."""
        return same_secret(user.csrf, given)

    # ------------------------------------------------------------------ audit
    def audit(self, user: str, action: str, job: str | None = None, client: str | None = None,
              **detail: Any) -> None:
        """Append to the audit log."""
        with self.db.connect() as conn:
            conn.execute("INSERT INTO audit (time, user, action, job, client, detail) VALUES (?, ?, ?, ?, ?, ?)",
                         (time.time(), user, action, job, client, json.dumps(detail, default=str)))

    def audit_log(self, limit: int = 200, user: str | None = None) -> list[dict[str, Any]]:
        """The newest audit entries."""
        with self.db.connect() as conn:
            rows = conn.execute("SELECT * FROM audit " + ("WHERE user = ? " if user else "") +
                                "ORDER BY id DESC LIMIT ?", (user, limit) if user else (limit,)).fetchall()
        return [{**dict(r), "detail": json.loads(r["detail"] or "{}")} for r in rows]
