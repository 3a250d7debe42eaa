"""Tasks: what a model learns to do. A task is a component like any other, registered through a hook.

A plugin declares a task with ``register_tasks`` (core's own tasks are registered the same way)::

    @hookimpl
    def register_tasks(register):
        register("text_classification", kind="classification",
                 description="predict a class from a text", batch="(token ids int64 [B, L], class int64 [B])")

The task's ``kind`` gives an :class:`~twinkle_core.Algorithm` its defaults (loss, metrics, the monitored
metric); ``monitor`` and ``mode`` override the monitored metric. Nothing here imports torch.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

from twinkle_core.errors import RegistrationError, UnknownTaskError

TASK_KINDS: dict[str, tuple[str, str]] = {
    "classification": ("val_accuracy", "max"),
    "regression": ("val_loss", "min"),
    "detection": ("val_map50", "max"),
    "forecasting": ("val_loss", "min"),
    "generation": ("val_loss", "min"),
    "other": ("val_loss", "min"),
}
"""Each task kind and the metric (with its mode) that picks the best checkpoint by default."""


@dataclass(frozen=True)
class Task:
    """One registered task.

    Attributes:
        name: the task's name (``"image_classification"``).
        kind: one of :data:`TASK_KINDS`; classification gets cross-entropy and accuracy, regression mean
            squared error and MAE.
        description: one line on what the task predicts.
        monitor: the validation metric that picks the best checkpoint (default: the kind's).
        mode: ``"max"`` when higher is better, else ``"min"`` (default: the kind's).
        batch: what a batch looks like, in words (``"(features float32 [B, F], class int64 [B])"``).
    """

    name: str
    kind: str = "other"
    description: str = ""
    monitor: str = ""
    mode: Literal["min", "max"] | str = ""
    batch: str = ""

    def __post_init__(self) -> None:
        """Fill the monitored metric from the kind."""
        default_metric, default_mode = TASK_KINDS.get(self.kind, TASK_KINDS["other"])
        if not self.monitor:
            object.__setattr__(self, "monitor", default_metric)
            if not self.mode:
                object.__setattr__(self, "mode", default_mode)
        if not self.mode:
            object.__setattr__(self, "mode", "min")

    @classmethod
    def from_registration(cls, plugin: str, name: str, meta: Mapping[str, Any]) -> Task:
        """Build a task from ``register(name, **meta)``, naming any bad value and its fix.

        Raises:
            RegistrationError: an unknown ``kind``, a ``mode`` other than min/max, or unknown keys.
        """
        where = f"plugin '{plugin}' registered task {name!r}"
        known = {"kind", "description", "monitor", "mode", "batch", "aliases"}
        unknown = sorted(set(meta) - known)
        if unknown:
            raise RegistrationError(f"{where} with unknown key(s) {', '.join(unknown)}; a task takes {', '.join(sorted(known))}")
        kind = meta.get("kind")
        if kind not in TASK_KINDS:
            raise RegistrationError(f"{where} with kind={kind!r}; pass kind= one of {', '.join(TASK_KINDS)}")
        mode = meta.get("mode", "")
        if mode not in ("", "min", "max"):
            raise RegistrationError(f"{where} with mode={mode!r}; pass mode='min' or mode='max'")
        return cls(name, str(kind), str(meta.get("description", "")), str(meta.get("monitor", "")), mode,
                   str(meta.get("batch", "")))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


def _registered() -> dict[str, Task]:
    from twinkle_core.lookup import list_components

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
    """Return ``task`` if a plugin registers it, else raise :class:`UnknownTaskError`."""
    get_task(task)
    return task


__all__ = ["TASK_KINDS", "Task", "check_task", "get_task", "list_tasks"]
