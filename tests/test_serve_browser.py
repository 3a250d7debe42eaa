"""The dashboard in a real browser: Debian's chromium, driven by Playwright. Log in with a token, submit a job
from the form built from the algorithm's hyperparameters, watch its curve gain points live, cancel another job
from its page, and open the API's docs (Swagger UI, from the server's own files). Screenshots go to
``$TWINKLE_ARTIFACTS/browser`` (default ``.cache/artifacts/browser``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from twinkle_core.client import Client

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("TWINKLE_ARTIFACTS", Path(__file__).resolve().parents[1] / ".cache" / "artifacts"))
pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a server and its worker pool


def test_log_in_submit_watch_the_curve_grow_and_cancel_in_chromium(twinkle_service, cancer_csv: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    assert os.path.exists(CHROMIUM), "the browser test needs Debian's chromium: make system (apt-get install chromium)"
    shots = ARTIFACTS / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    home, data, tokens = twinkle_service.home(cancer_csv, "alice")
    port = twinkle_service.free_port()
    url = f"http://127.0.0.1:{port}"
    twinkle_service.start(home, port, "--workers", "2", "--lease", "5", "--grace", "20", "--poll", "0.2")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"])  # Playwright gives it a fresh profile folder
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            refused = []  # what the pages' Content-Security-Policy blocked: nothing the dashboard needs
            page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(url + "/")
            expect(page).to_have_url(url + "/login")
            page.fill("#token", tokens["alice"])
            page.click("#login")
            expect(page.locator("h1")).to_have_text("Jobs")
            page.screenshot(path=str(shots / "jobs-empty.png"))

            # submit from the form built from tabular-mlp's declared hyperparameters
            page.goto(url + "/submit")
            page.select_option("#algorithm", "tabular-mlp")  # choosing one loads its form (app.js: no inline script)
            expect(page).to_have_url(url + "/submit?algorithm=tabular-mlp")
            expect(page.locator("#hp_optimizer")).to_be_visible()  # a Literal: a select with its choices
            page.fill("#data", data)
            page.fill("#hp_max_epochs", "400")
            page.fill("#hp_batch_size", "16")
            page.screenshot(path=str(shots / "submit-form.png"), full_page=True)
            page.click("#submit")
            expect(page.locator("#state .state")).to_have_text("running", timeout=120_000)
            chart = page.locator("#chart")
            first = _wait_for_points(chart, lambda n: n >= 2)  # read from outside the page: its CSP forbids eval
            _wait_for_points(chart, lambda n: n > first + 2)  # the curve gains points while we watch
            assert int(chart.get_attribute("data-points")) > first
            expect(page.locator("#log")).to_contain_text("Trainable params")
            page.screenshot(path=str(shots / "job-live-curve.png"), full_page=True)

            # another job, cancelled from its page: SIGTERM, a checkpoint, then 'cancelled' arrives live
            other = Client(url, tokens["alice"]).submit("tabular-mlp", data, {"max_epochs": 400, "batch_size": 16})
            page.goto(f"{url}/jobs/{other.id}")
            expect(page.locator("#state .state")).to_have_text("running", timeout=120_000)
            expect(page.locator("#log")).to_contain_text("Epoch", timeout=120_000)  # training, not still starting
            page.click("#cancel")
            expect(page.locator("#state .state")).to_have_text("cancelled", timeout=120_000)
            page.screenshot(path=str(shots / "job-cancelled.png"), full_page=True)
            assert "checkpoint at step" in (other.refresh()["reason"] or "")

            page.goto(url + "/")
            expect(page.locator(f"tr[data-job='{other.id}'] .state")).to_have_text("cancelled")
            page.screenshot(path=str(shots / "jobs.png"), full_page=True)

            # the API's docs render: Swagger UI from the server's own files, started without an inline script
            page.goto(url + "/docs")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("Twinkle")
            expect(page.locator(".opblock-summary-path").first).to_be_visible()
            page.screenshot(path=str(shots / "api-docs.png"))
            assert not [m for m in refused if "script" in m.lower() or "style" in m.lower()], refused
        finally:
            browser.close()
    for name in ("jobs-empty.png", "submit-form.png", "job-live-curve.png", "job-cancelled.png", "jobs.png",
                 "api-docs.png"):
        assert (shots / name).stat().st_size > 5000, name


def _wait_for_points(chart, enough, timeout: float = 120.0) -> int:  # noqa: ANN001
    """Poll the chart's ``data-points`` until ``enough(count)``; returns the count."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        count = int(chart.get_attribute("data-points") or 0)
        if enough(count):
            return count
        assert time.monotonic() < deadline, f"the chart stayed at {count} points"
        time.sleep(0.25)
