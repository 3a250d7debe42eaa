"""schemathesis fuzzes the service's OpenAPI schema — every operation, with generated bodies, paths and queries,
with a valid token and without one: no request makes the server answer 5xx, and without a token nothing but
the health check answers 2xx."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from twinkle_core.serve import Accounts, ServerConfig, create_app


def _fuzz(operation, examples: int, headers: dict[str, str], failures: list[str], anonymous: bool) -> None:  # noqa: ANN001
    @given(case=operation.as_strategy())
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case) -> None:  # noqa: ANN001
        response = case.call(headers=headers)
        if response.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} {case.query} {str(case.body)[:200]} → "
                            f"{response.status_code} {response.text[:300]}")
        elif anonymous and operation.path != "/api/v1/health" and response.status_code < 400:
            failures.append(f"{case.method} {case.formatted_path} answered {response.status_code} without a token")

    run()


def test_no_generated_request_is_a_server_error(tmp_path: Path, cancer_csv: Path) -> None:
    home = tmp_path / "home"
    (home / "datasets").mkdir(parents=True)
    shutil.copy(cancer_csv, home / "datasets" / "cancer.csv")
    config = ServerConfig(home=str(home), max_queued_per_user=20)
    token = Accounts(config.db_path).add_user("fuzzer")
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(config))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every endpoint of the API is in the schema and fuzzed
    failures: list[str] = []
    for operation in operations:
        _fuzz(operation, 20, {"Authorization": f"Bearer {token}"}, failures, anonymous=False)
        _fuzz(operation, 3, {}, failures, anonymous=True)
    assert not failures, "\n".join(failures[:20])


@pytest.mark.processes
def test_the_openapi_schema_tells_the_truth_under_every_schemathesis_check(tmp_path: Path, cancer_csv: Path) -> None:
    """Proves the schema describes the API: schemathesis (its CLI, ``--checks all``: status codes, content types,
    response schemas and headers, ``Allow`` on 405, negative and positive data, auth, use-after-free …) over every
    operation, in all phases including stateful sequences along the inferred links, bounded to 10 examples each
    with a fixed seed, finds no failure. The server listens on 127.0.0.1 only."""
    import socket
    import subprocess
    import sys
    import threading

    import uvicorn

    home = tmp_path / "home"
    (home / "datasets").mkdir(parents=True)
    shutil.copy(cancer_csv, home / "datasets" / "cancer.csv")
    config = ServerConfig(home=str(home), max_queued_per_user=500)
    token = Accounts(config.db_path).add_user("fuzzer", admin=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server did not start"
            threading.Event().wait(0.1)
        st = Path(sys.executable).with_name("st")
        done = subprocess.run([str(st), "run", "--checks", "all", "--max-examples", "10", "--seed", "20261202",
                               "--header", f"Authorization: Bearer {token}", "--no-color",
                               f"http://127.0.0.1:{port}/openapi.json"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    summary = done.stdout[-6000:]
    assert done.returncode == 0, summary
    counted = re.search(r"(\d+) generated, (\d+) passed", summary)
    assert counted and int(counted.group(1)) == int(counted.group(2)) > 200, summary  # every case passed
