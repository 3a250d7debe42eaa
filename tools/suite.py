"""The whole test suite, as ``make test`` runs it after the set-up, with its time reported (never asserted).

Parts, in order, each timed:

* **core** — the import layers (``lint-imports``), then twinkle-core's suite under pytest-xdist: two workers
  (``--dist loadgroup``), one torch thread each; tests marked ``processes`` share one worker, one at a time, and
  start first;
* **docs** — the documentation site (``tests/test_docs_site.py``: the strict build, every page's code). Its tests
  run *inside* core's session, on the worker the ``processes`` group leaves free (run apart, that worker would idle
  while the other works through the group), so ``docs`` is the time its tests took within ``core``, not added to it;
* **journeys** — each plugin from its wheel in a fresh venv, two at a time (``tools/wheel_journeys.py``): its
  journey and its own test suite. The wheels (``make dist``) build while core's session runs (its log:
  ``artifacts/dist.log``).

Every pytest run writes a JUnit XML file under ``artifacts/junit/``. At the end this prints one line::

    suite: N passed, M failed, S skipped in T s (install I s, core C s, docs D s, journeys J s)

and writes ``artifacts/test-times.json`` with those parts and the 25 slowest tests. It exits non-zero when any
part failed; every part runs even when an earlier one failed, so one run reports everything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
JUNIT = ARTIFACTS / "junit"
WORKERS = "2"
"""pytest-xdist workers: the machine CI runs on has two cores."""
SLOWEST = 25
DOCS_TESTS = "tests.test_docs_site::"
"""How the docs-site tests' JUnit names start (classname ``tests.test_docs_site``)."""


def pytest_command(junit: Path, *paths: str) -> list[str]:
    """pytest on ``paths`` with two workers, groups kept together, durations shown, a JUnit file."""
    return [sys.executable, "-m", "pytest", "-n", WORKERS, "--dist", "loadgroup", "--durations=15",
            f"--junitxml={junit}", *paths]


def run_part(name: str, commands: list[list[str]], env: dict[str, str]) -> tuple[float, bool]:
    """Run ``commands`` one after another (all of them, whatever fails); returns (seconds, all succeeded)."""
    print(f"== {name}", flush=True)
    started, ok = time.monotonic(), True
    for command in commands:
        if subprocess.run(command, cwd=ROOT, env=env).returncode != 0:
            ok = False
            print(f"== {name}: '{' '.join(command[:4])} ...' failed", flush=True)
    return time.monotonic() - started, ok


def junit_cases(paths: list[Path]) -> list[dict[str, object]]:
    """Every test case in the JUnit files: its suite, name, seconds and outcome."""
    cases = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = ("failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed")
            cases.append({"suite": path.stem, "test": f"{case.get('classname', '')}::{case.get('name', '')}",
                          "seconds": round(float(case.get("time") or 0), 2), "outcome": outcome})
    return cases


def main(argv: list[str] | None = None) -> int:
    """Run the parts, then report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--started", type=float, default=time.time(),
                        help="when 'make test' started (seconds since the epoch): T counts from there")
    parser.add_argument("--set-up-done", type=float, default=None,
                        help="when the set-up ('make install system') ended: install I is the time up to there")
    args = parser.parse_args(argv)
    JUNIT.mkdir(parents=True, exist_ok=True)
    for old in JUNIT.glob("*.xml"):
        old.unlink()
    # glibc keeps the memory the suite's trainings free instead of faulting fresh pages in every step (what the
    # planner's allocator choice does for a probed CPU training; the tests run unprobed, TWINKLE_PROBE=0): the
    # environment's form of twinkle_core.engine.allocator's "retain", for every process the suite starts
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
           "MALLOC_TRIM_THRESHOLD_": str(256 * 2**20)}
    bin_dir = Path(sys.executable).parent
    parts = {"install": (args.set_up_done - args.started) if args.set_up_done else 0.0}
    results = {}
    dist_log = ARTIFACTS / "dist.log"
    with dist_log.open("w") as log:  # the wheels build beside core's session (a few seconds of CPU, mostly I/O)
        dist = subprocess.Popen(["make", "--no-print-directory", "dist"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    parts["core"], results["core"] = run_part("core and docs", [
        [str(bin_dir / "lint-imports")],
        pytest_command(JUNIT / "core.xml", "tests"),
    ], env)
    started = time.monotonic()
    if dist.wait() != 0:
        print(f"== make dist failed:\n{dist_log.read_text()[-5000:]}", flush=True)
    _, journeys_ok = run_part("journeys", [[sys.executable, "tools/wheel_journeys.py", "--junit", str(JUNIT)]], env)
    parts["journeys"] = time.monotonic() - started  # the wait for the wheels, then the journeys
    results["journeys"] = journeys_ok and dist.returncode == 0
    total = time.time() - args.started
    cases = junit_cases(sorted(JUNIT.glob("*.xml")))
    docs_cases = [c for c in cases if str(c["test"]).startswith(DOCS_TESTS)]
    parts["docs"] = sum(float(c["seconds"]) for c in docs_cases)  # type: ignore[arg-type]
    results["docs"] = all(c["outcome"] != "failed" for c in docs_cases)
    counts = {kind: sum(1 for c in cases if c["outcome"] == kind) for kind in ("passed", "failed", "skipped")}
    report = {
        "total_seconds": round(total, 1),
        "parts_seconds": {name: round(seconds, 1) for name, seconds in parts.items()},
        "parts_note": "docs ran inside core's session: its seconds are part of core's, not added to the total",
        "parts_ok": results,
        "tests": counts,
        "tests_per_suite": {suite: sum(1 for c in cases if c["suite"] == suite)
                            for suite in sorted({str(c["suite"]) for c in cases})},
        "slowest": sorted(cases, key=lambda c: -float(c["seconds"]))[:SLOWEST],  # type: ignore[arg-type]
    }
    (ARTIFACTS / "test-times.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"suite: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in {total:.0f} s "
          f"(install {parts['install']:.0f} s, core {parts['core']:.0f} s, docs {parts['docs']:.0f} s, "
          f"journeys {parts['journeys']:.0f} s)")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
