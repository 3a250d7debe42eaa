"""The user's journey from wheels: every plugin in a fresh venv of its own, installed from ``dist/`` only.

For each plugin (and for a project made by ``twinkle plugins new acme``; ``onnx`` is the journey of an export
used where only core's wheel and onnxruntime are installed, see ``onnx_journey``) this

1. makes a fresh venv (uv, with its package cache in ``.cache/uv``: the first venv unpacks torch, the others link it);
2. installs torch (pinned) plus only ``twinkle-core``'s and that plugin's wheels from ``dist/`` — no editable
   installs, no sources on ``sys.path`` — and times it;
3. runs the plugin's smoke journey (``tools/journeys/<plugin>.py``: list, train a few steps on its sample data,
   export, continue) from an empty folder;
4. adds the plugin's ``test`` extra and runs the plugin's own test suite, copied out of the source tree, against
   the installed wheel.

Two tasks run at a time (``--jobs``: the machine CI runs on has two cores), the longest ready one first (``SECONDS``,
measured): a journey with its tests, or a share of a long suite (``SHARDS``: its test files in another pytest
process, once the journey's venv is ready) — without shares, the last long suite ran alone for minutes while the
other core idled. It writes a summary (wheel sizes, install and run times, test counts) to ``--summary``, each
suite's JUnit XML to ``--junit`` (when given), and exits non-zero when any step fails. ``make journeys`` runs it
after ``make dist``; ``make test`` runs both.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
import time
import threading
import tomllib
from pathlib import Path
from typing import Callable

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
    "llm": ("twinkle-llm", ""),
}
SECONDS = {"audio": 570, "edge": 500, "vision": 400, "llm": 540, "timeseries": 100, "acme": 30, "onnx": 60}
"""The order in which the journeys start, longest first (a sharded one early, so that its shares are ready when a
slot frees): estimates of each journey with all its tests. They are kept although one run measured other seconds:
ordered by those, the suites ran in pairs that slowed each other (809–846 s of journeys, December 2026)."""
SHARDS: dict[str, list[tuple[list[str], int]]] = {
    # plugin: its test files run as further shares (each in a pytest process of its own), with their seconds; the
    # files left run in the journey's own share. A share keeps the files whose fixtures are shared together.
    "edge": [(["test_optimizer.py"], 240)],
    "llm": [(["test_layouts.py"], 140)],  # its multi-process layouts, beside the rest of the suite
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
# tinker-cookbook (requirements/tinker-cookbook.txt), the Tinker test's client, run with the dev venv's Python
TINKER_COOKBOOK = ROOT / ".venv" / "share" / "twinkle" / "tinker-cookbook"


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
    env.setdefault("TWINKLE_TINKER_COOKBOOK", str(TINKER_COOKBOOK))
    return env


def share_bytecode(site: Path, compiled_site: Path) -> int:
    """Link into ``site`` the bytecode ``compiled_site`` holds for the very same source files, and return how many.

    uv installs every venv by hard-linking one unpacked copy of each wheel from its cache, and make's install
    compiled the dev venv's copy (``--compile-bytecode``). A fresh venv would compile torch, Lightning and the rest
    again at its first import (about 10 s of CPU per venv); a source file that is the same file (the same inode)
    in both venvs gets the dev venv's ``.pyc`` instead. Python checks a ``.pyc`` against its source's size and
    modification time — the same file's — and sets the code's file name to the path it imported from, so the venv
    runs exactly as if it had compiled it. Files that differ (the wheels under test, a platform wheel) compile as
    before.
    """
    tag, linked = sys.implementation.cache_tag, 0
    for folder, folders, files in os.walk(site):
        folders[:] = [name for name in folders if name != "__pycache__"]
        relative = os.path.relpath(folder, site)
        for name in files:
            if not name.endswith(".py"):
                continue
            compiled = os.path.join(compiled_site, relative, "__pycache__", f"{name[:-3]}.{tag}.pyc")
            target = os.path.join(folder, "__pycache__", f"{name[:-3]}.{tag}.pyc")
            try:
                if os.stat(os.path.join(folder, name)).st_ino != os.stat(os.path.join(compiled_site, relative,
                                                                                        name)).st_ino:
                    continue
                if os.path.exists(target) or not os.path.exists(compiled):
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.link(compiled, target)
                linked += 1
            except OSError:  # no twin, or another file system: it compiles as it would have
                continue
    return linked


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
        # as make does: a platform wheel that bundles its native library over a pure one (soundfile's libsndfile)
        self.run(f"{label}_platform_wheels", [sys.executable, str(ROOT / "tools" / "platform_wheels.py"),
                                              "--python", str(self.python), "--uv", self.uv])
        started = time.perf_counter()
        site = self.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        self.record[f"{label}_bytecode_linked"] = share_bytecode(site, Path(sysconfig.get_paths()["purelib"]))
        self.record[f"{label}_bytecode_seconds"] = round(time.perf_counter() - started, 1)

    def copy_tests(self, tests: Path) -> None:
        """Copy ``tests`` out of the source tree (into ``suite/``), with the project's pytest settings."""
        suite = self.folder / "suite"
        shutil.copytree(tests, suite / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
        ini = ["[pytest]", f"addopts = {options['addopts']} -p no:cacheprovider", f"timeout = {options['timeout']}",
               "filterwarnings =", *(f"    {w}" for w in options["filterwarnings"]),
               "markers =", *(f"    {m}" for m in options["markers"])]
        (suite / "pytest.ini").write_text("\n".join(ini) + "\n")

    def pytest(self, share: int = 0, files: list[str] | None = None, ignore: list[str] | None = None) -> None:
        """Run the copied tests (``files`` of them, or all but ``ignore``) against the installed wheels; share
        ``n`` > 0 is one of the suite's further pytest processes (its JUnit file and record entries say so)."""
        suffix = f"-{share}" if share else ""
        report = [f"--junitxml={self.junit / f'journey-{self.name}{suffix}.xml'}"] if self.junit else []
        chosen = [f"tests/{name}" for name in files] if files else ["tests"]
        skipped = [f"--ignore=tests/{name}" for name in ignore or []]
        done = self.run(f"tests{suffix}", [str(self.python), "-m", "pytest", "-q", "--durations=5", *report,
                                           *skipped, *chosen], cwd=self.folder / "suite")
        counts = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|deselected)", done.stdout)
        self.record[f"tests{suffix}"] = {kind: int(n) for n, kind in counts}
        say(f"{self.name}{suffix}", done.stdout.strip().splitlines()[-1])


_PRINT = threading.Lock()


class Scheduler:
    """Runs tasks on ``slots`` threads, the longest (by its estimate) of those waiting first; a running task may
    add more (a suite's shares, once its venv is ready). ``run`` returns when every task has ended."""

    def __init__(self, slots: int) -> None:
        """No task yet."""
        self.slots = max(1, slots)
        self.waiting: list[tuple[float, int, str, Callable[[], object]]] = []
        self.unfinished = 0
        self.results: dict[str, object] = {}
        self.ready = threading.Condition()
        self.order = itertools.count()  # ties: the task added first
        self.started = time.perf_counter()
        self.timeline: list[dict[str, object]] = []
        """Each task's name, slot, start and end (seconds from the scheduler's creation): which ran beside which."""

    def add(self, seconds: float, name: str, task: Callable[[], object]) -> None:
        """Queue ``task`` (expected to take ``seconds``); its result is kept under ``name``."""
        with self.ready:
            heapq.heappush(self.waiting, (-seconds, next(self.order), name, task))
            self.unfinished += 1
            self.ready.notify()

    def _slot(self) -> None:
        while True:
            with self.ready:
                while not self.waiting and self.unfinished:
                    self.ready.wait()
                if not self.waiting:
                    return
                _, _, name, task = heapq.heappop(self.waiting)
            began = time.perf_counter()
            try:
                result = task()
            finally:
                with self.ready:
                    self.unfinished -= 1
                    self.timeline.append({"task": name, "slot": threading.current_thread().name,
                                          "start": round(began - self.started, 1),
                                          "end": round(time.perf_counter() - self.started, 1)})
                    self.ready.notify_all()
            self.results[name] = result

    def run(self) -> dict[str, object]:
        """Run every task; returns their results by name."""
        threads = [threading.Thread(target=self._slot, name=f"journey-slot-{n}") for n in range(self.slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.results


def say(name: str, text: str) -> None:
    """Print a journey's lines, each prefixed with its name (two journeys print at once)."""
    with _PRINT:
        print("\n".join(f"[{name}] {line}" for line in text.splitlines()), flush=True)


def plugin_journey(name: str, dist_dir: Path, work: Path, uv: str, tests: bool, junit: Path | None = None,
                   schedule: Scheduler | None = None) -> dict[str, object]:
    """The whole journey of one of Twinkle's own plugins; returns its record. The suite's further shares
    (``SHARDS``) are handed to ``schedule`` once the venv is ready (run here, one after another, without one);
    their results join the record (and its ``error``) when they end."""
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
        journey.copy_tests(ROOT / "plugins" / distribution / "tests")
        shares = SHARDS.get(name, [])
        for number, (files, seconds) in enumerate(shares, start=1):
            def share(number: int = number, files: list[str] = files) -> dict[str, object]:
                try:
                    journey.pytest(number, files=files)
                except RuntimeError as err:
                    journey.record["error"] = str(journey.record.get("error", "")) + str(err)[-3000:]
                    say(name, str(err))
                return journey.record
            if schedule is not None:
                schedule.add(seconds, f"{name}-{number}", share)
            else:
                share()
        journey.pytest(ignore=[f for files, _ in shares for f in files])
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
    journey.copy_tests(project / "tests")
    journey.pytest()
    journey.record["wheels"] = [core.name, built.name]
    return journey.record


ONNX_RUNTIME_ONLY = ("onnxruntime", "numpy", "pillow", "pandas", "click", "pluggy", "fsspec")
"""What the ONNX-only journey installs beside core's wheel (which goes in without its dependencies: no torch):
onnxruntime, NumPy and Pillow to predict images, pandas for tables, and what the CLI and the URIs need."""

HEAVY = ("torch", "torchvision", "lightning", "ultralytics", "cv2", "timm", "twinkle_vision")
"""What must not be importable in the ONNX-only venv."""


def onnx_journey(dist_dir: Path, work: Path, uv: str, junit: Path | None = None) -> dict[str, object]:
    """Exports used where only core's wheel, onnxruntime, NumPy and Pillow are installed: a tabular model, a ResNet
    classifier and a YOLO detector trained and exported in a venv with core's and twinkle-vision's wheels
    (``tools/journeys/onnx_export.py``; named so as not to shadow the onnx package), then ``twinkle predict
    model.onnx`` for each in a venv holding core's wheel without its dependencies plus ``ONNX_RUNTIME_ONLY`` —
    torch, OpenCV, ultralytics and the plugin are not even installed there (``HEAVY``) — whose rows must be the
    runs' own predictions: the same ids and classes, probabilities within 1e-5; for the detector the same boxes'
    classes, scores within 1e-4 and corners within 0.05 px."""
    core, vision = wheel(dist_dir, "twinkle-core"), wheel(dist_dir, "twinkle-vision")
    exporting = Journey("onnx", dist_dir, work, uv, junit)
    exporting.fresh_venv()
    exporting.install("install", [*TORCH_PINS, str(core), f"twinkle-vision[yolo] @ {vision.as_uri()}"])
    scratch = exporting.folder / "journey"
    scratch.mkdir()
    script = ROOT / "tools" / "journeys" / "onnx_export.py"
    done = exporting.run("journey", [str(exporting.python), str(script), str(scratch)], cwd=scratch)
    say("onnx", "\n".join(done.stdout.strip().splitlines()[-3:]))
    bare = Journey("onnx-runtime", dist_dir, work, uv)
    bare.fresh_venv()
    bare.install("runtime_install", list(ONNX_RUNTIME_ONLY))
    bare.run("core_install", [uv, "pip", "install", "-q", "--python", str(bare.python), "--no-deps", str(core)])
    probe = bare.run("torch_absent", [str(bare.python), "-c", "import importlib.util as u; print([m for m in "
                                      f"{HEAVY!r} if u.find_spec(m) is not None])"]).stdout.strip()
    assert probe == "[]", f"the onnxruntime-only venv has {probe} installed"
    twinkle = str(bare.venv / "bin" / "twinkle")
    for label, model, data, output in (("predict", "model.onnx", "rows.csv", "onnx.csv"),
                                       ("predict_resnet", "resnet.onnx", "digits", "resnet-onnx.csv"),
                                       ("predict_yolo", "yolo.onnx", "photos", "yolo-onnx.jsonl")):
        bare.run(label, [twinkle, "predict", str(scratch / model), "--data", str(scratch / data), "-o",
                         str(scratch / output)])
    rows = same_classes(scratch / "onnx.csv", scratch / "run.csv")
    images = same_classes(scratch / "resnet-onnx.csv", scratch / "resnet-run.csv")
    boxes = same_boxes(scratch / "yolo-onnx.jsonl", scratch / "yolo-run.jsonl")
    say("onnx", f"twinkle predict model.onnx without torch: {rows} rows, {images} images classified, {boxes} boxes "
                "found in 6 images: the runs' own predictions")
    return {**exporting.record, **{k: v for k, v in bare.record.items() if k != "plugin"},
            "wheels": [core.name, vision.name], "rows": rows, "images": images, "boxes": boxes}


def same_classes(alone: Path, run: Path) -> int:
    """Check an export's classification rows against the run's (ids, classes, every probability within 1e-5);
    returns their count."""
    import pandas as pd

    ours, theirs = pd.read_csv(alone, dtype={"class": str}), pd.read_csv(run, dtype={"class": str})
    assert ours["id"].astype(str).tolist() == theirs["id"].astype(str).tolist(), f"{alone}: other samples than {run}"
    assert ours["class"].tolist() == theirs["class"].tolist(), f"{alone}: other classes than the run's ({run})"
    columns = [c for c in theirs.columns if c.startswith("p_") or c == "probability"]
    difference = float((ours[columns] - theirs[columns]).abs().to_numpy().max())
    assert difference < 1e-5, f"{alone}: probabilities differ from the run's by {difference}"
    return len(ours)


def same_boxes(alone: Path, run: Path) -> int:
    """Check an export's detection rows against the run's (ids, sizes, each image's boxes: classes equal, scores
    within 1e-4, corners within 0.05 px); returns the number of boxes."""
    ours = [json.loads(line) for line in alone.read_text().splitlines()]
    theirs = [json.loads(line) for line in run.read_text().splitlines()]
    assert [r["id"] for r in ours] == [r["id"] for r in theirs], f"{alone}: other images than {run}"
    found = 0
    for mine, expected in zip(ours, theirs):
        assert (mine["width"], mine["height"]) == (expected["width"], expected["height"]), mine["id"]
        a, b = (sorted((box["class"], box["score"], *box["box"]) for box in row["boxes"]) for row in (mine, expected))
        assert [x[0] for x in a] == [x[0] for x in b], f"{mine['id']}: other boxes' classes than the run's"
        for x, y in zip(a, b):
            assert abs(x[1] - y[1]) <= 1e-4 and max(abs(p - q) for p, q in zip(x[2:], y[2:])) <= 0.05, (x, y)
        found += len(a)
    assert found > 0, "the detector found no box: the comparison would prove nothing"
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the journeys named on the command line (default: all), two at a time, and write the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", default=[*PLUGINS, "acme", "onnx"],
                        help="plugins (and 'acme', 'onnx'); default: all")
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

    schedule = Scheduler(args.jobs)

    def one(name: str) -> dict[str, object]:
        say(name, "== journey")
        try:
            if name == "acme":
                record = scaffold_journey(args.dist, args.work, uv, args.junit)
            elif name == "onnx":
                record = onnx_journey(args.dist, args.work, uv, args.junit)
            else:
                record = plugin_journey(name, args.dist, args.work, uv, tests=not args.no_tests, junit=args.junit,
                                        schedule=schedule)
        except (RuntimeError, AssertionError) as err:
            record = {"plugin": name, "error": str(err)[-3000:]}
            say(name, str(err))
        say(name, json.dumps(record))
        return record

    for name in args.names:
        schedule.add(SECONDS.get(name, 60), name, lambda name=name: one(name))
    schedule.run()
    records = []  # one record per journey, once its shares have ended too (they add to the same record)
    for name in args.names:
        record = schedule.results.get(name)
        records.append(record if isinstance(record, dict) else {"plugin": name, "error": "did not run"})
    failures = [str(r["plugin"]) for r in records if "error" in r]
    sizes = {p.name: p.stat().st_size for p in sorted(args.dist.glob("*")) if p.suffix in {".whl", ".gz"}}
    summary = {"dist": sizes, "journeys": records, "timeline": schedule.timeline,
               "total_seconds": round(time.perf_counter() - started, 1)}
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"summary: {args.summary}; failed: {', '.join(failures) or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
