"""The error answers every API operation may give (documented in the OpenAPI schema with ``ErrorBody``), and
the router each resource's routes hang on."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from twinkle_core.serve.strict_json import StrictJSONRoute


class ErrorBody(BaseModel):
    """Every error the API answers (4xx; 422 lists each invalid field)."""

    detail: str = Field(description="what was wrong, naming the field or value, and the fix")


def error_response(meaning: str) -> dict[str, Any]:
    """An error answer's OpenAPI entry: ``meaning`` and ``ErrorBody``, as JSON whatever the operation's own
    answers are (the event stream's are text/event-stream)."""
    return {"description": meaning, "content": {"application/json": {"schema": ErrorBody.model_json_schema()}}}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_response("a bad request: an unknown algorithm or hyperparameter, a bad value, a body that is not JSON"),
    401: error_response("no valid token ('Authorization: Bearer <token>')"),
    403: error_response("not allowed: data outside your roots, a write through a browser session, an admin's page"),
    404: error_response("no such job, run, model, upload or algorithm — or not yours; data a job names that does "
                        "not exist"),
    413: error_response("the body is larger than the server's max_body_bytes (uploads: max_upload_bytes)"),
}
"""The error answers every operation may give, each with ``ErrorBody`` (422 is FastAPI's own model)."""


def resource_router() -> APIRouter:
    """A router for one resource's routes: strict JSON bodies, and ``ERRORS`` documented on each."""
    return APIRouter(route_class=StrictJSONRoute, responses=ERRORS)
