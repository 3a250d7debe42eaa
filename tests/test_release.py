"""The six distributions as released: one version, a change-log entry for it, the core range each plugin
declares, complete metadata, and every data file of a package inside its wheel's package data."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from twinkle_core.scaffold import core_range

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [ROOT, *sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())]


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def _core_version() -> str:
    return str(_project(ROOT)["project"]["version"])


def test_six_distributions_share_one_version_with_a_changelog_entry() -> None:
    names = {_project(p)["project"]["name"]: _project(p)["project"]["version"] for p in PROJECTS}
    assert set(names) == {"twinkle-core", "twinkle-vision", "twinkle-timeseries", "twinkle-audio", "twinkle-edge",
                          "twinkle-llm"}
    assert set(names.values()) == {_core_version()}
    Version(_core_version())  # a valid version
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {_core_version()} — " in changelog


@pytest.mark.parametrize("folder", PROJECTS[1:], ids=lambda p: p.name)
def test_each_plugin_declares_the_core_range_of_this_release(folder: Path) -> None:
    requirements = [Requirement(r) for r in _project(folder)["project"]["dependencies"]]
    core = [r for r in requirements if r.name == "twinkle-core"]
    assert len(core) == 1 and str(core[0].specifier) == str(Requirement("x" + core_range(_core_version())).specifier)
    assert core[0].specifier.contains(_core_version())


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: p.name)
def test_metadata_is_complete(folder: Path) -> None:
    project = _project(folder)["project"]
    assert project["license"] == "Apache-2.0" and (folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert (folder / project["readme"]).exists() and project["description"]
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(project["urls"])
    assert project["urls"] == _project(ROOT)["project"]["urls"]
    classifiers = project["classifiers"]
    assert "Programming Language :: Python :: 3" in classifiers and any(c.startswith("Topic ::") for c in classifiers)
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression says it (PEP 639)


def test_the_agpl_extra_is_flagged() -> None:
    vision = _project(ROOT / "plugins" / "twinkle-vision")
    assert "AGPL-3.0" in vision["project"]["description"] and "ultralytics" in str(vision["project"]["optional-dependencies"]["yolo"])
    assert "AGPL" in (ROOT / "plugins" / "twinkle-vision" / "README.md").read_text()
    assert "ultralytics is AGPL-3.0" in (ROOT / "plugins" / "twinkle-vision" / "pyproject.toml").read_text()


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: p.name)
def test_every_data_file_of_a_package_is_package_data(folder: Path) -> None:
    config = _project(folder)["tool"]["setuptools"]
    package_data: dict[str, list[str]] = config.get("package-data", {})
    packages = [pattern.rstrip("*") for pattern in config["packages"]["find"]["include"]]
    tracked = subprocess.run(["git", "ls-files", *packages], cwd=folder, capture_output=True, text=True,
                             check=True).stdout.split()
    data = [f for f in tracked if not f.endswith(".py")]
    missing = []
    for path in data:
        top, _, inside = path.partition("/")
        if not any(fnmatch.fnmatch(inside, pattern.replace("**/", "*")) for pattern in package_data.get(top, [])):
            missing.append(path)
    assert not missing, f"{folder.name}: files its wheel would leave out; add them to [tool.setuptools.package-data]"


# imported without being declared, on purpose: starlette is FastAPI's own (the serve extra); rknn runs in the
# converter venv that 'twinkle edge setup' makes, never in the training environment
_BROUGHT_BY_ANOTHER = {"starlette", "rknn"}


def _third_party_imports(package: Path) -> dict[str, str]:
    import ast
    import sys

    found: dict[str, str] = {}
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and not top.startswith("twinkle") and top not in _BROUGHT_BY_ANOTHER:
                    found.setdefault(top, str(source.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("folder", PROJECTS, ids=lambda p: p.name)
def test_every_import_is_a_declared_dependency(folder: Path) -> None:
    from importlib.metadata import packages_distributions
    from packaging.utils import canonicalize_name

    project = _project(folder)["project"]
    declared = {canonicalize_name(Requirement(r).name)
                for r in [*project["dependencies"], *sum(project.get("optional-dependencies", {}).values(), [])]}
    owners = packages_distributions()
    package = folder / _project(folder)["tool"]["setuptools"]["packages"]["find"]["include"][0].rstrip("*")
    undeclared = {top: where for top, where in _third_party_imports(package).items()
                  if not {canonicalize_name(d) for d in owners.get(top, [top])} & declared}
    assert not undeclared, f"imported but not declared in {folder.name}/pyproject.toml: {undeclared}"
