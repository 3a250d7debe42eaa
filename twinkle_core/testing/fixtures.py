"""pytest fixtures that twinkle-core installs (entry point ``pytest11``); import-light on purpose."""

from __future__ import annotations

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
