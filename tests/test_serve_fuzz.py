"""schemathesis fuzzes the service's OpenAPI schema — every operation, with generated bodies, paths and queries,
with a valid token and without one: no request makes the server answer 5xx, and without a token nothing but
the health check answers 2xx."""

from __future__ import annotations

import shutil
from pathlib import Path

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
