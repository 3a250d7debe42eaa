"""Public lookup functions over the installed plugins' components (timm's ``list_models`` style).

Example:
    >>> from twinkle_core import list_algorithms
    >>> list_algorithms("resnet*", task="image_classification")  # doctest: +SKIP
    ['resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152']
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from twinkle_core.components import Component, Task
from twinkle_core.errors import UnknownTaskError
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


def _registered() -> dict[str, Task]:
    return {c.name: c.load() for c in list_components("task")}


def list_tasks() -> list[Task]:
    """Every registered task (core's and the installed plugins'), sorted by name."""
    return sorted(_registered().values(), key=lambda t: t.name)


def get_task(name: str) -> Task:
    """The registered task ``name``.

    Raises:
        UnknownTaskError: no plugin registers it; the message lists close matches and every known task.
    """
    tasks = _registered()
    if name in tasks:
        return tasks[name]
    close = difflib.get_close_matches(name, list(tasks), n=3)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownTaskError(
        f"unknown task '{name}'; {hint}known tasks: {', '.join(sorted(tasks))}. A plugin adds a task with the "
        "register_tasks hook (see docs/plugins/tasks.md)"
    )


def check_task(task: str) -> str:
    """Return ``task`` if a plugin registers it, else raise ``UnknownTaskError``."""
    get_task(task)
    return task
