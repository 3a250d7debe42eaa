"""The service's interactive API docs (``/docs``, Swagger UI) are served from the server's own vendored files, so
they render under the server's Content-Security-Policy and on a machine that reaches no CDN."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from twinkle_core.serve import ServerConfig, create_app

VENDOR = Path(__file__).resolve().parents[1] / "twinkle_core" / "serve" / "static" / "vendor"


def _policy(header: str) -> dict[str, list[str]]:
    """A Content-Security-Policy header as ``{directive: [sources]}``."""
    directives = (part.split() for part in header.split(";") if part.strip())
    return {words[0]: words[1:] for words in directives}


def _allowed(url: str, policy: dict[str, list[str]], directive: str) -> bool:
    """Whether ``policy`` lets a page of this server load ``url`` under ``directive`` (else ``default-src``): a URL
    of the server itself needs ``'self'``; another origin must be listed."""
    sources = policy.get(directive, policy.get("default-src", []))
    parts = urlsplit(url)
    if not parts.scheme and not parts.netloc:  # a path on the page's own origin
        return "'self'" in sources
    return any(source.rstrip("/") in url for source in sources if not source.startswith("'"))


def test_the_docs_page_loads_only_scripts_and_styles_the_server_serves_and_its_policy_allows(tmp_path: Path) -> None:
    """GET /docs answers Swagger UI's page; every script and stylesheet it loads is a URL of the server itself that
    answers 200 with a JavaScript or CSS type, allowed by the page's own Content-Security-Policy, and the page holds
    no inline script (the policy allows none), so nothing a browser needs is blocked or fetched from a CDN. The
    schema the page reads answers too, and ReDoc (which would need a CDN) is not offered."""
    client = TestClient(create_app(ServerConfig(home=str(tmp_path / "home"))))
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text[:300]
    policy = _policy(page.headers["content-security-policy"])
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", page.text, flags=re.S)
    assert scripts, page.text
    assert all(not body.strip() for _, body in scripts), "an inline script: the policy's script-src blocks it"
    loads = [(re.search(r'\bsrc="([^"]+)"', attrs)[1], "script-src", "javascript") for attrs, _ in scripts]
    links = re.findall(r"<link\b[^>]*>", page.text)
    loads += [(re.search(r'\bhref="([^"]+)"', tag)[1], "style-src", "text/css") for tag in links
              if 'rel="stylesheet"' in tag]
    assert any(kind == "text/css" for *_, kind in loads), page.text
    for url, directive, kind in loads:
        assert _allowed(url, policy, directive), f"{url} is blocked by {directive} of {policy}"
        answer = client.get(url)
        assert answer.status_code == 200 and kind in answer.headers["content-type"], (url, answer.status_code,
                                                                                     answer.headers)
    assert any("SwaggerUIBundle" in client.get(url).text for url, _, kind in loads if kind == "javascript")
    schema_url = re.search(r'data-openapi-url="([^"]+)"', page.text)[1]
    assert client.get(schema_url).json()["paths"]["/api/v1/jobs"]["post"]
    assert client.get("/redoc").status_code == 404


def test_the_vendored_swagger_ui_carries_its_licence() -> None:
    """Swagger UI's files are shipped with its Apache-2.0 licence and NOTICE beside them, and the bundle's
    third-party notices; LICENSES.txt names the version and where each file came from."""
    assert "Apache License" in (VENDOR / "swagger-ui.LICENSE").read_text()
    assert "SmartBear" in (VENDOR / "swagger-ui.NOTICE").read_text()
    assert (VENDOR / "swagger-ui-bundle.js.LICENSE.txt").stat().st_size > 1000
    listing = (VENDOR / "LICENSES.txt").read_text()
    assert re.search(r"swagger-ui-dist \d+\.\d+\.\d+ .*Apache-2\.0", listing)
