"""pytest fixtures that twinkle-core installs (entry point ``pytest11``); import-light on purpose."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest


@pytest.fixture
def twinkle_plugin() -> Iterator[Callable[..., Any]]:
    """Register plugin objects in-process for one test: ``twinkle_plugin(obj, name="acme")``.

    Every plugin registered through the fixture is unregistered when the test ends.
    """
    from twinkle_core.plugins import get_plugin_set

    names: list[str] = []

    def register(plugin: Any, name: str = "test-plugin") -> Any:
        info = get_plugin_set().register(plugin, name=name)
        names.append(name)
        return info

    yield register
    for name in reversed(names):
        get_plugin_set().unregister(name)


@pytest.fixture
def twinkle_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh run store for one test (``TWINKLE_HOME`` in its temporary folder), with a fixed user ``tester``."""
    home = tmp_path / "home"
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    monkeypatch.delenv("TWINKLE_CATALOGUE", raising=False)
    return home


@pytest.fixture
def twinkle_service(tmp_path: Path) -> Iterator[Any]:
    """``twinkle serve`` on loopback ports for one test (``twinkle_core.testing.ServiceRunner``): every server
    it started is killed, with its workers, when the test ends."""
    from twinkle_core.testing.service import ServiceRunner

    runner = ServiceRunner(tmp_path)
    yield runner
    runner.stop_all()


PROCESSES_GROUP = "processes"
"""The pytest-xdist group of tests marked ``processes``: they run one after another on one worker."""


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``processes`` marker."""
    config.addinivalue_line(
        "markers",
        "processes: the test starts several busy processes itself (DDP, torchrun, Ray, FSDP2, pipeline stages, a "
        "service's workers); under pytest-xdist (--dist loadgroup) such tests run one after another on one worker, "
        "never beside each other")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every ``processes`` test in one xdist group, and first in the collection: the longest unit of work
    starts first while the other worker takes the rest."""
    grouped = config.pluginmanager.hasplugin("xdist")  # under -p no:xdist the group (and its marker) do not exist
    for item in items:
        if grouped and item.get_closest_marker("processes") is not None:
            item.add_marker(pytest.mark.xdist_group(PROCESSES_GROUP))
    items.sort(key=lambda item: item.get_closest_marker("processes") is None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under ``--dist loadgroup``, fail a ``processes`` test that pytest-xdist did not put in its group (a pytest
    it does not support: pytest-xdist#1386) rather than run it beside another multi-process test."""
    if (item.get_closest_marker("processes") is not None and getattr(item.config.option, "loadgroup", False)
            and not item.nodeid.endswith(f"@{PROCESSES_GROUP}")):
        pytest.fail("pytest-xdist did not put this 'processes' test in its group: this pytest and pytest-xdist do "
                    "not work together (pytest-xdist#1386); install the versions in requirements/constraints.txt",
                    pytrace=False)
