"""``/docs``: Swagger UI for the REST API, served from the files the server ships (``static/vendor``).

FastAPI's own ``/docs`` loads Swagger UI from a CDN and starts it with an inline script; the service's
Content-Security-Policy (``security.SECURITY_HEADERS``: scripts from the server itself only) blocks both, and an
air-gapped server cannot reach the CDN anyway. This page loads the vendored ``swagger-ui-bundle.js`` and
``swagger-ui.css`` (swagger-ui-dist, Apache-2.0: ``static/vendor/LICENSES.txt``) and starts it from
``static/api-docs.js``. ReDoc is not offered: it would need a CDN, or another megabyte vendored, for the same schema.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{root}/static/vendor/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{schema}"></div>
<script src="{root}/static/vendor/swagger-ui-bundle.js"></script>
<script src="{root}/static/api-docs.js"></script>
</body>
</html>
"""


def mount_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` for ``app``'s OpenAPI schema (the app is built with ``docs_url=None``, and
    ``/static`` is mounted by the dashboard)."""

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = escape(str(request.scope.get("root_path", "")).rstrip("/"), quote=True)
        return HTMLResponse(_PAGE.format(title=escape(f"{app.title} — API"), root=root,
                                         schema=root + escape(app.openapi_url or "/openapi.json", quote=True)))
