"""Shared fixtures for twinkle-core's tests: fake installed distributions and a CLI runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator

import pytest

from twinkle_core.testing import run_script


_TWINKLE_VARS = ("TWINKLE_STRICT_PLUGINS", "TWINKLE_LOAD_PLUGINS", "TWINKLE_DISABLED_PLUGINS")
_OUTSIDE_VARS = ("TWINKLE_CATALOGUE", "TWINKLE_SERVER", "TWINKLE_TOKEN", "TWINKLE_NAS_ROOT", "TWINKLE_PRICES",
                 "TWINKLE_LAUNCHER", "TWINKLE_NUM_NODES", "TWINKLE_JOB_DIR")


@pytest.fixture(scope="session", autouse=True)
def _session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Module- and session-scoped fixtures (set up before any test's own) also write to a temporary store,
    never to ``~/.twinkle``."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TWINKLE_HOME", str(tmp_path_factory.mktemp("session-home")))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Every test starts with a run store of its own (``TWINKLE_HOME`` in its temporary folder) and none of the
    shell's Twinkle settings, so tests can run in any order and two at a time (pytest-xdist). The signal handlers
    a test leaves behind are undone too: ``ray.init`` installs a SIGTERM handler that calls ``sys.exit``, and a later
    test in the same worker that sends itself SIGTERM must meet Lightning's, not Ray's."""
    for var in (*_TWINKLE_VARS, *_OUTSIDE_VARS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "twinkle-home"))
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in handlers.items():
        if signal.getsignal(number) is not handler:
            signal.signal(number, handler)


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    """A folder put on ``PYTHONPATH`` for subprocesses: fake distributions are 'installed' there."""
    path = tmp_path / "site"
    path.mkdir()
    return path


def write_distribution(
    site: Path, name: str, version: str, entry_points: dict[str, str], modules: dict[str, str],
    requires: tuple[str, ...] = (),
) -> None:
    """Install a minimal distribution into ``site``: its dist-info metadata plus module sources.

    ``importlib.metadata`` reads ``*.dist-info`` folders on ``sys.path`` exactly like a pip install's;
    ``requires`` become its ``Requires-Dist`` lines.
    """
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir()
    requires_lines = "".join(f"Requires-Dist: {r}\n" for r in requires)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires_lines}")
    lines = ["[twinkle]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def make_dist(site_dir: Path) -> Callable[..., None]:
    """``make_dist(name, version, entry_points, modules, requires=())`` installs a fake distribution into ``site_dir``."""

    def make(name: str, version: str, entry_points: dict[str, str], modules: dict[str, str],
             requires: tuple[str, ...] = ()) -> None:
        write_distribution(site_dir, name, version, entry_points, modules, requires)

    return make


@pytest.fixture
def run_twinkle(site_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m twinkle_core ARGS`` (or ``python ARGS`` with ``python=True``) with ``site_dir`` on the path."""

    def run(*args: str, env: dict[str, str] | None = None, python: bool = False) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if k not in _TWINKLE_VARS}
        full_env["PYTHONPATH"] = os.pathsep.join([str(site_dir), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        full_env.update(env or {})
        cmd = [sys.executable, *args] if python else [sys.executable, "-m", "twinkle_core", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)

    return run


ACME_PLUGIN = '''
"""Acme's Twinkle plugin (a third party)."""
from twinkle_core import hookimpl

@hookimpl
def register_algorithms(register):
    """Register Acme's algorithms."""
    register("acme-linear", "acme_mod:AcmeLinear", task="tabular_classification",
             description="Acme's linear classifier")
'''

ACME_MOD = '''
"""Acme's model code: heavy imports are allowed here."""
from torch import nn
from twinkle_core.algorithm import Algorithm

class AcmeLinear(Algorithm):
    """A linear classifier."""
    task = "tabular_classification"

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.width = width

    def build_model(self, spec):
        return nn.Linear(spec.num_features, spec.num_classes)
'''


@pytest.fixture
def acme(make_dist: Callable[..., None]) -> None:
    """Install the third-party 'acme-twinkle' distribution (plugin 'acme', algorithm 'acme-linear')."""
    make_dist("acme-twinkle", "1.2.0", {"acme": "acme_plugin"}, {"acme_plugin": ACME_PLUGIN, "acme_mod": ACME_MOD})


@pytest.fixture
def broken(make_dist: Callable[..., None]) -> None:
    """Install 'broken-twinkle' 0.3.0, whose plugin module raises on import."""
    make_dist(
        "broken-twinkle",
        "0.3.0",
        {"broken": "broken_plugin"},
        {"broken_plugin": 'raise RuntimeError("boom: missing native library")\n'},
    )


def write_cancer_csv(path: Path) -> Path:
    """scikit-learn's breast-cancer data (569 rows, 30 features, 'target') as CSV."""
    from sklearn.datasets import load_breast_cancer

    load_breast_cancer(as_frame=True).frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def cancer_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The breast-cancer CSV, written once per session."""
    return write_cancer_csv(tmp_path_factory.mktemp("data") / "cancer.csv")



class JobRunner:
    """Runs a training script as its own job (its own process group, so it can kill itself whole). Each rank
    writes ``<first argument>-rank<N>.json`` beside the script."""

    def raw(self, script: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """Run it; the process with ``.results`` (rank → dict of what each rank wrote)."""
        import json

        for old in script.parent.glob(f"{args[0]}-rank*.json"):
            old.unlink()
        # a process of its own (session and group), forked from one that imported the Trainer once; Lightning
        # starts a script's other ranks in fresh interpreters. Killed before pytest-timeout's 600 s, with every
        # rank's stacks (faulthandler) in its stderr, so that a hung job's failure says where each rank waited
        proc = run_script([str(script), *args], env={**os.environ, "PYTHONWARNINGS": "ignore",
                                                     "PYTHONFAULTHANDLER": "1"}, timeout=480)
        proc.results = {int(p.stem.rsplit("rank", 1)[1]): json.loads(p.read_text())  # type: ignore[attr-defined]
                        for p in script.parent.glob(f"{args[0]}-rank*.json")}
        return proc

    def __call__(self, script: Path, *args: str) -> dict[int, dict]:
        """Run it and return the per-rank results (failing with its output when it did not succeed)."""
        proc = self.raw(script, *args)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-12000:]
        return proc.results  # type: ignore[attr-defined]


@pytest.fixture
def run_job() -> JobRunner:
    """``run_job(script, *args)`` → per-rank results; ``run_job.raw(...)`` → the process (a killed job)."""
    return JobRunner()
