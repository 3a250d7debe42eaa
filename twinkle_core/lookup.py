"""Public lookup functions over the installed plugins' components (timm's ``list_models`` style).

Example:
    >>> from twinkle_core import list_algorithms
    >>> list_algorithms("resnet*", task="image_classification")  # doctest: +SKIP
    ['resnet101', 'resnet152', 'resnet18', 'resnet34', 'resnet50']
"""

from __future__ import annotations

from typing import Any, Iterable

from twinkle_core.components import Component
from twinkle_core.plugins import get_plugin_set

Pattern = str | Iterable[str] | None


def list_components(kind: str, pattern: Pattern = None, *, task: str | None = None) -> list[Component]:
    """Registered components of ``kind`` matching glob ``pattern`` and ``task``; imports no target."""
    return get_plugin_set().registry.list(kind, pattern, task=task)


def get_component(kind: str, name: str) -> Component:
    """Resolve ``name`` or ``plugin:name`` to one component of ``kind`` (its target is not imported).

    Raises:
        twinkle_core.errors.UnknownComponentError: nothing matches; lists close matches and choices.
        twinkle_core.errors.AmbiguousComponentError: several plugins registered the name.
    """
    return get_plugin_set().registry.get(kind, name)


def load_component(kind: str, name: str) -> Any:
    """Resolve ``name`` and import its target (the class or object the plugin registered)."""
    return get_component(kind, name).load()


def list_algorithms(pattern: Pattern = None, task: str | None = None) -> list[str]:
    """Names of registered algorithms, e.g. ``list_algorithms("yolo*", task="object_detection")``."""
    return [c.name for c in list_components("algorithm", pattern, task=task)]


def list_data_processors(pattern: Pattern = None, task: str | None = None) -> list[str]:
    """Names of registered data processors matching ``pattern`` and ``task``."""
    return [c.name for c in list_components("data_processor", pattern, task=task)]


def list_resource_strategies(pattern: Pattern = None, task: str | None = None) -> list[str]:
    """Names of registered resource strategies matching ``pattern`` and ``task``."""
    return [c.name for c in list_components("resource_strategy", pattern, task=task)]


def list_exporters(pattern: Pattern = None) -> list[str]:
    """Names of registered exporters matching ``pattern``."""
    return [c.name for c in list_components("exporter", pattern)]
