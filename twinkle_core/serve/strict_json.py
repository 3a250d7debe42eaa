"""Strict JSON at the service's edge: a request body holding ``NaN`` or an infinity is refused when it is parsed
(422, the field's path named), and no validation error can fail to be written as JSON.

Python's ``json`` module reads ``NaN``, ``Infinity``, ``-Infinity`` and numbers too large for a float (``1e999``)
although JSON has none of them; stored, such a value makes invalid JSON that breaks every later read of it. The API's
routes are ``StrictJSONRoute``, which looks for them in the body before FastAPI validates it;
``validation_error`` is the application's 422 handler, which writes any value JSON cannot hold as text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from twinkle_core.serve.queue import finite

NOT_FINITE = "finite_number"
"""The error ``type`` of a non-finite number in a request body."""


class _NonFinite(str):
    """A non-finite number found while parsing: its text as the body wrote it."""


def _number(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def non_finite_fields(body: bytes) -> list[tuple[tuple[str | int, ...], str]]:
    """Every number in the JSON ``body`` that is not finite, as ``(path, text)``; ``[]`` for any body that is not
    JSON (FastAPI names that error itself)."""
    try:
        parsed = json.loads(body, parse_float=_number, parse_constant=_NonFinite)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return []
    found: list[tuple[tuple[str | int, ...], str]] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), parsed)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _NonFinite):
            found.append((path, str(value)))
        elif isinstance(value, dict):
            stack.extend(((*path, key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))
    return sorted(found, key=lambda item: [str(part) for part in item[0]])


class StrictJSONRoute(APIRoute):
    """An API route whose JSON body may not hold ``NaN``, ``Infinity`` or a number beyond a float: the request is
    answered 422 with each such field's ``loc`` before the handler or the model sees it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, after the body's numbers are checked."""
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            if request.method in ("POST", "PUT", "PATCH") and "json" in request.headers.get("content-type", ""):
                found = non_finite_fields(await request.body())  # Starlette keeps the body for the handler
                if found:
                    raise RequestValidationError([
                        {"type": NOT_FINITE, "loc": ("body", *path), "input": text,
                         "msg": f"{text} is not a number JSON can hold: give a finite number"}
                        for path, text in found])
            return await handler(request)

        return checked


def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
    """422 with ``{"detail": [errors]}`` as FastAPI writes it, any value JSON cannot hold (a NaN echoed back, an
    exception in ``ctx``) written as text, so that answering the error cannot fail."""
    errors = err.errors()
    try:
        detail = finite(jsonable_encoder(errors))
    except Exception:  # an input jsonable_encoder cannot walk: say what was wrong without echoing it
        detail = [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg"))} for e in errors]
    return JSONResponse({"detail": detail}, status_code=422)


def too_large(limit: int) -> str:
    """What a 413 for a body over the server's ``max_body_bytes`` (``limit``) says."""
    return (f"the request body is larger than this server's limit of {limit} bytes (max_body_bytes); uploads go to "
            "PUT /api/v1/uploads/{name}")


class JSONTooLarge:
    """ASGI middleware: the 413 that the body-size limit answers in plain text (``Content Too Large``) answered as
    every other error is, ``{"detail": ...}`` in JSON, naming the limit (``limit``: the server's
    ``max_body_bytes``)."""

    def __init__(self, app: Any, limit: int) -> None:
        """Wrap ``app``."""
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Rewrite a plain-text 413 on its way out."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rewriting = False

        async def as_json(message: Any) -> None:
            nonlocal rewriting
            if message["type"] == "http.response.start" and message["status"] == 413:
                headers = dict(message.get("headers", []))
                rewriting = headers.get(b"content-type", b"").startswith(b"text/plain")
                if rewriting:
                    body = json.dumps({"detail": too_large(self.limit)}).encode()
                    kept = [(k, v) for k, v in message.get("headers", [])
                            if k.lower() not in (b"content-type", b"content-length")]
                    await send({**message, "headers": [*kept, (b"content-type", b"application/json"),
                                                       (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
            if rewriting:
                return  # the plain-text body, replaced above
            await send(message)

        await self.app(scope, receive, as_json)


def json_error_protocol() -> type:
    """uvicorn's HTTP protocol (httptools where installed, as uvicorn's ``auto`` picks, else h11) whose answer to a
    request it cannot parse — a body longer than its ``Content-Length`` says (the rest read as a next request), a
    malformed header — is a 400 with ``{"detail": ...}`` in JSON, as every other error, instead of uvicorn's plain
    text (the parse fails before any application code runs, so only the protocol can answer it)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # no httptools: uvicorn runs h11
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class JSONErrorProtocol(Base):  # type: ignore[misc,valid-type]
        """``Base`` with its 400 for an unparsable request in JSON."""

        def send_400_response(self, msg: str) -> None:
            """A JSON 400 naming what could not be parsed; the connection closes, as uvicorn's own does."""
            body = json.dumps({"detail": f"{msg.rstrip('.')}: the request's framing is broken (a Content-Length "
                                         "that does not match its body, or a malformed header line); what could "
                                         "not be parsed was not run"}).encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: "
                                 + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
            self.transport.close()

    return JSONErrorProtocol
