"""Register a plugin object in-process, for the length of a ``with`` block or a test."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from twinkle_core.plugins import PluginInfo, get_plugin_set


@contextlib.contextmanager
def registered_plugin(plugin: Any, name: str = "test-plugin") -> Iterator[PluginInfo]:
    """Register ``plugin`` (a module, class or object with hookimpls) as ``name`` inside the block.

    For example:

    ```python
    class AcmePlugin:
        @hookimpl
        def register_algorithms(self, register):
            register("acme-linear", "acme_mod:AcmeLinear", task="tabular_classification")

    with registered_plugin(AcmePlugin(), name="acme"):
        assert "acme-linear" in list_algorithms()
    ```
    """
    plugin_set = get_plugin_set()
    info = plugin_set.register(plugin, name=name)
    try:
        yield info
    finally:
        plugin_set.unregister(name)
