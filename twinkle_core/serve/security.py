"""The service's security facts, apart from where they are stored: who a request is (``User``), how tokens,
session ids and CSRF tokens are made and compared, the cookies that carry them and the headers every response
gets.

A token is 32 random bytes (``tw_`` + URL-safe base64), shown once when the user is added; only its SHA-256 is
stored (``digest``), so the database gives nobody a usable token. A browser logs in with the token and gets a
random session id in an HttpOnly, SameSite cookie (``SESSION_COOKIE``); each session has its own CSRF token for the
dashboard's forms, and the login form one of its own (``LOGIN_CSRF_COOKIE``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "twinkle_session"
"""The dashboard's session cookie."""
SESSION_SECONDS = 12 * 3600
"""How long a dashboard login lasts."""
LOGIN_CSRF_COOKIE = "twinkle_login_csrf"
"""The login form's own CSRF cookie (path ``/login``; there is no session to tie a token to yet)."""
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'self'; object-src 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
"""Headers on every response of the service: no framing, no content-type sniffing, no script or form target but the
server's own (styles may be inline: htmx and uPlot set them)."""


@dataclass(frozen=True)
class User:
    """Who makes a request."""

    name: str
    admin: bool = False
    csrf: str | None = None
    """The session's CSRF token (browser sessions only)."""


def new_token() -> str:
    """A new API token: ``tw_`` and 32 random bytes, URL-safe."""
    return "tw_" + secrets.token_urlsafe(32)


def new_session_id() -> str:
    """A new browser session id (the session cookie's value)."""
    return secrets.token_urlsafe(32)


def new_csrf_token() -> str:
    """A new CSRF token (a session's, or the login form's)."""
    return secrets.token_urlsafe(24)


def digest(secret: str) -> str:
    """What is stored of a token or session id: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def same_secret(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the secret ``expected`` (both present; compared in constant time)."""
    return bool(expected and given and hmac.compare_digest(expected, given))
