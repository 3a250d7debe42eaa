"""``twinkle serve``: training as a service — a FastAPI app, a SQLite (WAL) job queue with leases, local worker
processes, token auth, a dashboard (the ``twinkle-core[serve]`` extra).

- ``ServerConfig`` — how the server runs (address, auth, workers, limits, data roots, Ray address);
- ``serve`` — run it; ``create_app`` — the ASGI app alone (tests, other servers);
- ``JobQueue``, ``Accounts`` — the job table and the users, sessions and audit log (stored); ``User`` and how
  tokens, sessions and CSRF tokens are made and checked: ``twinkle_core.serve.security``;
- ``JobRequest`` — what a client submits; ``twinkle_core.client.Client`` submits it.
"""

from twinkle_core.serve.accounts import Accounts
from twinkle_core.serve.config import DataAccessError, ServerConfig, check_data_uri
from twinkle_core.serve.queue import FINAL_STATES, STATES, JobQueue, QueueFullError
from twinkle_core.serve.security import User
from twinkle_core.serve.submission import JobRequest

__all__ = ["Accounts", "DataAccessError", "FINAL_STATES", "JobQueue", "JobRequest", "QueueFullError", "STATES",
           "ServerConfig", "User", "check_data_uri", "create_app", "serve"]


def create_app(config: ServerConfig):  # noqa: ANN201 — a FastAPI app (imported on use: fastapi is an extra)
    """The service's ASGI application (see ``twinkle_core.serve.app``)."""
    from twinkle_core.serve.app import create_app as _create

    return _create(config)


def serve(config: ServerConfig) -> None:
    """Run the service until SIGTERM/SIGINT (see ``twinkle_core.serve.server``)."""
    from twinkle_core.serve.server import serve as _serve

    _serve(config)
