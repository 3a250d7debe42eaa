"""Choosing components for a run: the algorithm class, the data processor and the resource strategy."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from twinkle_core.algorithm import Algorithm
from twinkle_core.components import Component
from twinkle_core.errors import TwinkleError
from twinkle_core.lookup import get_component, list_components
from twinkle_core.tasks import check_task
from twinkle_core.uris import suffix


@dataclass(frozen=True)
class AlgorithmChoice:
    """A resolved algorithm: the name runs record, the class, and the tasks it serves."""

    name: str
    cls: type[Algorithm]
    tasks: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)


def resolve_algorithm(algorithm: str | type[Algorithm]) -> AlgorithmChoice:
    """A registered name (``"resnet50"``, ``"plugin:name"``) or an ``Algorithm`` subclass.

    A ``module:Class`` string is not imported (a name may come from a file, a job or a checkpoint): pass the
    class itself, or register it.

    Raises:
        UnknownComponentError: an unknown name (with close matches); TwinkleError: not an Algorithm.
    """
    if isinstance(algorithm, str):  # only the registry turns a name into an import, never a module path
        component = get_component("algorithm", algorithm)
        cls = component.load()
        _check_algorithm_class(cls, component.qualified_name)
        tasks = component.tasks or ((cls.task,) if cls.task else ())
        return AlgorithmChoice(component.name, cls, tasks, component.defaults)
    if inspect.isclass(algorithm) and issubclass(algorithm, Algorithm):
        return AlgorithmChoice(f"{algorithm.__module__}:{algorithm.__qualname__}", algorithm, _class_tasks(algorithm))
    raise TwinkleError(
        f"algorithm must be a registered name or an Algorithm subclass, got {algorithm!r}; "
        "see 'twinkle algorithms list'"
    )


def _class_tasks(cls: type[Algorithm]) -> tuple[str, ...]:
    if cls.task:
        return (cls.task,)
    default = inspect.signature(cls.__init__).parameters.get("task")
    if default is not None and isinstance(default.default, str):
        return (default.default,)
    try:  # the task is set in __init__, as in the article's KronosModel: build one with the defaults
        return (cls().task,)
    except Exception:  # required hyperparameters: the caller must pass task=
        return ()


def _check_algorithm_class(cls: Any, name: str) -> None:
    if not (inspect.isclass(cls) and issubclass(cls, Algorithm)):
        raise TwinkleError(f"algorithm '{name}' is not an Algorithm subclass ({cls!r}); report it to its plugin")


def resolve_task(choice: AlgorithmChoice, task: str | None) -> str:
    """The run's task: the one asked for (known, and served by the algorithm) or the algorithm's own.

    Raises:
        UnknownTaskError: an unknown task; TwinkleError: a task the algorithm does not serve.
    """
    if task is None:
        if not choice.tasks:
            raise TwinkleError(f"algorithm '{choice.name}' declares no task; pass task=...")
        return check_task(choice.tasks[0])
    check_task(task)
    if choice.tasks and task not in choice.tasks:
        raise TwinkleError(
            f"algorithm '{choice.name}' serves {', '.join(choice.tasks)}, not {task}; "
            f"pick an algorithm for {task} (twinkle algorithms list --task {task})"
        )
    return task


def choose_processor(task: str, uri: str | None, name: str | None) -> Component:
    """The data processor named ``name``, or the one for ``task`` that reads ``uri``'s format.

    Raises:
        TwinkleError: none for the task, or several that read the format (asking for ``data_processor=``).
    """
    if name:
        return get_component("data_processor", name)
    candidates = list_components("data_processor", task=task)
    if not candidates:
        raise TwinkleError(
            f"no installed data processor serves {task}; install a plugin for it or pass data_processor=..."
        )
    if len(candidates) == 1 or uri is None:
        return candidates[0]
    from twinkle_core.data.hf import HF_FORMAT, is_hf_dataset

    extension = HF_FORMAT if is_hf_dataset(uri) else suffix(uri) or "folder"
    matching = [c for c in candidates if extension in c.formats] or [c for c in candidates if not c.formats]
    if len(matching) == 1:
        return matching[0]
    raise TwinkleError(
        f"several data processors serve {task} ({', '.join(c.qualified_name for c in candidates)}); "
        "pass data_processor=<name>"
    )


def choose_strategy(task: str, name: str | None) -> Component:
    """The resource strategy named ``name``, else the one registered for ``task``, else ``default``."""
    if name:
        return get_component("resource_strategy", name)
    specific = list_components("resource_strategy", task=task)
    if len(specific) > 1:
        raise TwinkleError(
            f"several resource strategies serve {task} ({', '.join(c.qualified_name for c in specific)}); "
            "pass resource_strategy=<name>"
        )
    return specific[0] if specific else get_component("resource_strategy", "default")
