"""The user's journey from wheels: every plugin in a fresh venv of its own, installed from ``dist/`` only.

For each plugin (and for a project made by ``twinkle plugins new acme``) this

1. makes a fresh venv (uv, with its package cache in ``.cache/uv``: the first venv unpacks torch, the others link it);
2. installs torch (pinned) plus only ``twinkle-core``'s and that plugin's wheels from ``dist/`` — no editable
   installs, no sources on ``sys.path`` — and times it;
3. runs the plugin's smoke journey (``tools/journeys/<plugin>.py``: list, train a few steps on its sample data,
   export, continue) from an empty folder;
4. adds the plugin's ``test`` extra and runs the plugin's own test suite, copied out of the source tree, against
   the installed wheel.

Two journeys run at a time (``--jobs``; the longest first), each test suite in one process: the machine CI runs
on has two cores. It writes a summary (wheel sizes, install and run times, test counts) to ``--summary``, each
suite's JUnit XML to ``--junit`` (when given), and exits non-zero when any step fails. ``make journeys`` runs it
after ``make dist``; ``make test`` runs both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from uv_sources import pip_sources

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
TORCH_PINS = ("torch==2.14.1", "torchvision==0.29.1")
PLUGINS = {
    # name: (distribution, extras the journey itself needs), the longest journeys first (two run at a time)
    "audio": ("twinkle-audio", ""),
    "edge": ("twinkle-edge", ""),
    "vision": ("twinkle-vision", ""),
    "timeseries": ("twinkle-timeseries", "data"),
}
TEST_SIBLINGS = {
    # plugins whose test suites (not code) use another plugin: that plugin comes from dist/ too
    "edge": ("twinkle-vision[yolo]",),
}
# the test sessions' environment (one thread, every cache in .cache, nothing online)
CACHE_ENV: dict[str, str] = runpy.run_path(str(ROOT / "conftest.py"))["CACHE_DEFAULTS"]
# rknn-toolkit2's converter venv that 'make' built inside the dev venv (700 MB; it borrows the same pinned torch):
# the journeys' fresh venvs use it instead of making their own
RKNN_VENV = ROOT / ".venv" / "share" / "twinkle" / "rknn-venv"


def wheel(dist_dir: Path, distribution: str) -> Path:
    """The one wheel of ``distribution`` in ``dist_dir``."""
    found = sorted(dist_dir.glob(f"{distribution.replace('-', '_')}-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"expected one wheel of {distribution} in {dist_dir}, found {[p.name for p in found]}; "
                         "run 'make dist'")
    return found[0]


def clean_env() -> dict[str, str]:
    """This process's environment without anything that points Python at the source tree or the dev venv."""
    # PYTHONDONTWRITEBYTECODE is dropped too: uv does not compile at install, so without it every process of a
    # plugin's test suite would compile torch and the rest from source again
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE"}}
    env.update(CACHE_ENV)
    env["UV_CACHE_DIR"] = str(CACHE / "uv")
    env.setdefault("TWINKLE_RKNN_VENV", str(RKNN_VENV))
    return env


class Journey:
    """One plugin's venv, installs, journey and tests; ``record`` collects what the summary reports."""

    def __init__(self, name: str, dist_dir: Path, work: Path, uv: str, junit: Path | None = None) -> None:
        """Prepare the journey of ``name``: its venv lives in ``work/name/venv``; its suite's JUnit XML goes to
        ``junit/journey-<name>.xml`` when ``junit`` is given."""
        self.name, self.dist_dir, self.uv, self.junit = name, dist_dir, uv, junit
        self.folder = work / name
        self.venv = self.folder / "venv"
        self.python = self.venv / "bin" / "python"
        self.env = clean_env()
        self.record: dict[str, object] = {"plugin": name}

    def run(self, label: str, cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run one step, timing it into the record; its output is shown when it fails."""
        started = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd or self.folder, env=self.env, capture_output=True, text=True)
        self.record[f"{label}_seconds"] = round(time.perf_counter() - started, 1)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-6000:]
            raise RuntimeError(f"[{self.name}] {label} failed ({done.returncode}): {' '.join(cmd)}\n{tail}")
        return done

    def fresh_venv(self) -> None:
        """A new, empty venv (any earlier one is removed)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.run("venv", [self.uv, "venv", "-q", "--python", sys.executable, str(self.venv)])

    def install(self, label: str, requirements: list[str]) -> None:
        """uv-install ``requirements`` (wheels from ``dist/`` and pinned third parties) into the venv."""
        cmd = [self.uv, "pip", "install", "-q", "--python", str(self.python), "--link-mode", "hardlink",
               "-c", str(ROOT / "requirements" / "constraints.txt"), "--find-links", str(self.dist_dir),
               *pip_sources(), *requirements]
        self.run(label, cmd)

    def pytest(self, tests: Path) -> None:
        """Copy ``tests`` out of the source tree and run them here with the project's pytest settings."""
        suite = self.folder / "suite"
        shutil.copytree(tests, suite / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
        ini = ["[pytest]", f"addopts = {options['addopts']} -p no:cacheprovider", f"timeout = {options['timeout']}",
               "filterwarnings =", *(f"    {w}" for w in options["filterwarnings"]),
               "markers =", *(f"    {m}" for m in options["markers"])]
        (suite / "pytest.ini").write_text("\n".join(ini) + "\n")
        report = [f"--junitxml={self.junit / f'journey-{self.name}.xml'}"] if self.junit else []
        done = self.run("tests", [str(self.python), "-m", "pytest", "-q", "--durations=5", *report, "tests"],
                        cwd=suite)
        counts = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|deselected)", done.stdout)
        self.record["tests"] = {kind: int(n) for n, kind in counts}
        say(self.name, done.stdout.strip().splitlines()[-1])


_PRINT = threading.Lock()


def say(name: str, text: str) -> None:
    """Print a journey's lines, each prefixed with its name (two journeys print at once)."""
    with _PRINT:
        print("\n".join(f"[{name}] {line}" for line in text.splitlines()), flush=True)


def plugin_journey(name: str, dist_dir: Path, work: Path, uv: str, tests: bool,
                   junit: Path | None = None) -> dict[str, object]:
    """The whole journey of one of Twinkle's own plugins; returns its record."""
    distribution, extras = PLUGINS[name]
    core, plugin = wheel(dist_dir, "twinkle-core"), wheel(dist_dir, distribution)
    journey = Journey(name, dist_dir, work, uv, junit)
    journey.fresh_venv()
    journey.install("install", [*TORCH_PINS, str(core), f"{distribution}[{extras}] @ {plugin.as_uri()}" if extras
                                else str(plugin)])
    journey.record["wheels"] = [core.name, plugin.name]
    scratch = journey.folder / "journey"
    scratch.mkdir()
    done = journey.run("journey", [str(journey.python), str(ROOT / "tools" / "journeys" / f"{name}.py"), str(scratch)],
                       cwd=scratch)
    say(name, "\n".join(done.stdout.strip().splitlines()[-4:]))
    if tests:
        siblings = [f"{d} @ {wheel(dist_dir, d.split('[')[0]).as_uri()}" for d in TEST_SIBLINGS.get(name, ())]
        journey.install("test_install", [f"{distribution}[test] @ {plugin.as_uri()}", *siblings])
        journey.pytest(ROOT / "plugins" / distribution / "tests")
    return journey.record


def scaffold_journey(dist_dir: Path, work: Path, uv: str, junit: Path | None = None) -> dict[str, object]:
    """``twinkle plugins new acme`` in a venv with only core's wheel: the project builds, installs and passes."""
    core = wheel(dist_dir, "twinkle-core")
    journey = Journey("acme", dist_dir, work, uv, junit)
    journey.fresh_venv()
    journey.install("install", [*TORCH_PINS, str(core)])
    twinkle = str(journey.venv / "bin" / "twinkle")
    journey.run("new", [twinkle, "plugins", "new", "acme", "--directory", str(journey.folder)])
    project = journey.folder / "twinkle-acme"
    journey.run("build", [uv, "build", "-q", "--wheel", "--out-dir", str(journey.folder / "dist"), str(project)])
    built = wheel(journey.folder / "dist", "twinkle-acme")
    journey.install("test_install", [f"twinkle-acme[test] @ {built.as_uri()}"])
    listed = journey.run("list", [twinkle, "plugins", "list", "--json"]).stdout
    row = {r["name"]: r for r in json.loads(listed)}.get("acme")
    assert row is not None and row["error"] is None, listed
    journey.pytest(project / "tests")
    journey.record["wheels"] = [core.name, built.name]
    return journey.record


def main(argv: list[str] | None = None) -> int:
    """Run the journeys named on the command line (default: all), two at a time, and write the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", default=[*PLUGINS, "acme"], help="plugins (and 'acme'); default: all")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=CACHE / "journeys")
    parser.add_argument("--summary", type=Path, default=ROOT / "artifacts" / "journeys.json")
    parser.add_argument("--junit", type=Path, default=None, help="a folder for each suite's JUnit XML")
    parser.add_argument("--jobs", type=int, default=2, help="journeys at a time (default 2: one per core)")
    parser.add_argument("--no-tests", action="store_true", help="the journeys only, not the plugins' test suites")
    args = parser.parse_args(argv)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("uv is not installed: pip install 'twinkle-core[release]' (make installs it)")
    if args.junit:
        args.junit.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def one(name: str) -> dict[str, object]:
        say(name, "== journey")
        try:
            if name == "acme":
                record = scaffold_journey(args.dist, args.work, uv, args.junit)
            else:
                record = plugin_journey(name, args.dist, args.work, uv, tests=not args.no_tests, junit=args.junit)
        except (RuntimeError, AssertionError) as err:
            record = {"plugin": name, "error": str(err)[-3000:]}
            say(name, str(err))
        say(name, json.dumps(record))
        return record

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        records = list(pool.map(one, args.names))
    failures = [str(r["plugin"]) for r in records if "error" in r]
    sizes = {p.name: p.stat().st_size for p in sorted(args.dist.glob("*")) if p.suffix in {".whl", ".gz"}}
    summary = {"dist": sizes, "journeys": records, "total_seconds": round(time.perf_counter() - started, 1)}
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"summary: {args.summary}; failed: {', '.join(failures) or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
