"""``twinkle plugins new``: the generated project installs and lists. Its own tests — the contract, its processor
on sample data, a run that trains, evaluates and predicts — run where the plugin tutorial's commands run
(``test_docs_site.py``, docs/plugins/tutorial.md: new, ``pip install -e``, ``pytest``) and from the wheels
(``tools/wheel_journeys.py acme``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twinkle_core.errors import TwinkleError
from twinkle_core.scaffold import core_range, create_plugin_project, plugin_names


def test_names() -> None:
    assert plugin_names("acme-tab") == {
        "name": "acme-tab",
        "dist": "twinkle-acme-tab",
        "package": "twinkle_acme_tab",
        "cls": "AcmeTabLinear",
        "task": "acme_tab_classification",
        "core_version": plugin_names("x")["core_version"],
        "core_range": plugin_names("x")["core_range"],
    }
    with pytest.raises(TwinkleError, match="not valid"):
        plugin_names("acme tab")


def test_core_range_is_the_minor_series() -> None:
    assert core_range("0.2.0") == ">=0.2,<0.3"
    assert core_range("0.2.7.dev1") == ">=0.2,<0.3"
    assert core_range("1.4.0") == ">=1.4,<2"
    assert core_range("0+unknown") == ""


def test_existing_folder_is_refused(tmp_path: Path) -> None:
    create_plugin_project("acme", tmp_path)
    with pytest.raises(TwinkleError, match="already exists"):
        create_plugin_project("acme", tmp_path)


@pytest.mark.slow
def test_generated_plugin_installs_and_lists(tmp_path: Path, run_twinkle, site_dir) -> None:
    created = run_twinkle("plugins", "new", "acme-tab", "--directory", str(tmp_path))
    assert created.returncode == 0, created.stderr
    root = tmp_path / "twinkle-acme-tab"
    assert {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} == {
        "pyproject.toml",
        "README.md",
        "twinkle_acme_tab/__init__.py",
        "twinkle_acme_tab/plugin.py",
        "twinkle_acme_tab/algorithms.py",
        "twinkle_acme_tab/processors.py",
        "tests/test_plugin.py",
    }
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site_dir), str(root)],
        check=True, capture_output=True, timeout=300,
    )
    listed = run_twinkle("plugins", "list")
    assert any(line.split()[:3] == ["acme-tab", "0.1.0", "twinkle-acme-tab"] for line in listed.stdout.splitlines())
    algorithms = run_twinkle("algorithms", "list", "acme-tab-*")
    assert "twinkle_acme_tab.algorithms:AcmeTabLinear" in algorithms.stdout
    tasks = run_twinkle("tasks", "list", "--json")
    assert any(t["name"] == "acme_tab_classification" and t["plugin"] == "acme-tab" for t in json.loads(tasks.stdout))
