"""What every journey checks first: it runs from installed wheels only, and `twinkle plugins list` shows the plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path


def assert_installed_from_wheels(*packages: str) -> None:
    """Each package imports from this environment's site-packages (not a source tree, not an editable install)."""
    import importlib

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for name in ("twinkle_core", *packages):
        module = importlib.import_module(name)
        where = Path(module.__file__).resolve()
        assert site in where.parents, f"{name} is imported from {where}, not from the wheel in {site}"
    editable = sorted(p.name for p in site.glob("*.pth") if "__editable__" in p.name or "twinkle" in p.read_text())
    assert not editable, f"editable installs in the journey's environment: {editable}"


def plugins_listed() -> dict[str, dict]:
    """``twinkle plugins list --json`` through the installed console script, by plugin name."""
    twinkle = Path(sys.executable).with_name("twinkle")
    out = subprocess.run([str(twinkle), "plugins", "list", "--json"], check=True, capture_output=True, text=True,
                         env={**os.environ, "TWINKLE_STRICT_PLUGINS": "1"})
    return {row["name"]: row for row in json.loads(out.stdout)}


def continued(run_uri: str, work: Path, **hyperparams: object) -> str:
    """Continue ``run_uri`` (the store in ``work/home``) with ``hyperparams``; checks it finished as its child."""
    from twinkle_core import Trainer

    child = Trainer.from_checkpoint(run_uri, hyperparams=hyperparams, home=str(work / "home"), progress_bar=False).fit()
    assert child.status == "finished" and child.parent == run_uri, (child.status, child.parent)
    return child.run_uri


def doctor() -> list[dict]:
    """``twinkle doctor --json`` through the installed console script: it exits 0 (nothing an installed plugin
    needs is missing); returns its findings."""
    twinkle = Path(sys.executable).with_name("twinkle")
    out = subprocess.run([str(twinkle), "doctor", "--json"], capture_output=True, text=True)
    findings = json.loads(out.stdout) if out.stdout.strip().startswith("[") else []
    missing = [f"{f['name']}: {f['detail']} (fix: {f['fix']})" for f in findings if f["status"] == "missing"]
    assert out.returncode == 0, f"twinkle doctor exited {out.returncode}: {missing or out.stderr[-2000:]}"
    return findings


def start(plugin: str, package: str) -> dict:
    """The journey's first steps: wheels only, then the plugin is listed without an error and `twinkle doctor`
    finds nothing missing; returns its row."""
    assert_installed_from_wheels(package)
    rows = plugins_listed()
    assert plugin in rows, f"twinkle plugins list does not show {plugin}: {sorted(rows)}"
    assert rows[plugin]["error"] is None, rows[plugin]["error"]
    print(f"listed: {plugin} {rows[plugin]['version']} {rows[plugin]['components']}")
    checked = doctor()
    print(f"doctor: {len(checked)} checks, " + ", ".join(f"{f['name']} {f['status']}" for f in checked
                                                         if f["plugin"] != "twinkle-core"))
    return rows[plugin]
