"""What a plugin registers: component kinds, the ``Component`` record, and ``Task`` (a task's record).

A component is one registered thing — an algorithm, a data processor, a resource strategy, an exporter, a
command, a training backend or a check — under a name, with the plugin that registered it, a lazily imported target and metadata.
Nothing here imports a target until ``Component.load`` is called.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

from twinkle_core.errors import PluginLoadError, RegistrationError
from twinkle_core.imports import import_heavy


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
        kind: one of ``TASK_KINDS``; classification gets cross-entropy and accuracy, regression mean
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


@dataclass(frozen=True)
class Kind:
    """One of the extension points.

    Attributes:
        name: the kind's singular name (``"algorithm"``).
        hook: the hook that registers it (``"register_algorithms"``).
        required_meta: metadata keys ``register`` must receive for this kind.
        base: ``"module:attr"`` of the class a target must subclass (checked by the contract suite).
        plural: the word used in the CLI (``"algorithms"``).
    """

    name: str
    hook: str
    required_meta: tuple[str, ...]
    base: str
    plural: str


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("task", "register_tasks", (), "twinkle_core.components:Task", "tasks"),
        Kind("algorithm", "register_algorithms", ("task",), "twinkle_core.algorithm:Algorithm", "algorithms"),
        Kind(
            "data_processor",
            "register_data_processors",
            ("task",),
            "twinkle_core.data.processor:DataProcessor",
            "data-processors",
        ),
        Kind(
            "resource_strategy",
            "register_resource_strategies",
            (),
            "twinkle_core.planning.strategy:ResourceStrategy",
            "resource-strategies",
        ),
        Kind("exporter", "register_exporters", ("format",), "twinkle_core.exporting.base:Exporter", "exporters"),
        Kind("command", "register_commands", (), "click:Command", "commands"),
        Kind("training_backend", "register_training_backends", (), "twinkle_core.lowlevel.backend:TrainingBackend",
             "training-backends"),
        Kind("check", "register_checks", (), "twinkle_core.doctor:Check", "checks"),
        Kind("reward", "register_rewards", (), "twinkle_core.rewards:Reward", "rewards"),
        Kind("tracker", "register_trackers", (), "twinkle_core.tracking:Tracker", "trackers"),
    )
}
"""The component kinds, by name: tasks, algorithms, data processors, resource strategies, exporters, commands,
training backends, checks (``twinkle doctor``), rewards (reinforcement learning), experiment trackers
(``report_to``)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*([/-]\*)?$")
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def import_target(path: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute.

    Raises:
        PluginLoadError: the module or attribute cannot be imported; the message names ``path``.
    """
    module_name, _, attr_path = path.partition(":")
    try:
        obj: Any = import_heavy(module_name)  # a plugin's model code: torch, timm, ...
        for part in attr_path.split("."):
            obj = getattr(obj, part)
    except Exception as err:  # any import-time failure of third-party code
        raise PluginLoadError(f"cannot import '{path}': {type(err).__name__}: {err}") from err
    return obj


@dataclass(frozen=True)
class Component:
    """One registered component.

    Attributes:
        kind: ``"task"``, ``"algorithm"``, ``"data_processor"``, ``"resource_strategy"`` or ``"exporter"``.
        name: the registered name (``"resnet50"``).
        plugin: the name of the plugin that registered it.
        target: a ``"module:attr"`` string or the object itself.
        meta: the metadata given to ``register`` (``task``, ``format``, ``description``, ...).
    """

    kind: str
    name: str
    plugin: str
    target: Any
    meta: Mapping[str, Any] = field(default_factory=dict)
    _loaded: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def qualified_name(self) -> str:
        """``plugin:name``, which always resolves to this component."""
        return f"{self.plugin}:{self.name}"

    @property
    def task(self) -> str | None:
        """The (first) task this component serves, if any."""
        return self.tasks[0] if self.tasks else None

    @property
    def tasks(self) -> tuple[str, ...]:
        """Every task this component serves (``task=`` may be one name or a list)."""
        task = self.meta.get("task")
        if not task:
            return ()
        return (task,) if isinstance(task, str) else tuple(task)

    @property
    def formats(self) -> tuple[str, ...]:
        """File suffixes a data processor reads (``formats=[...]``; a lone ``format="csv"``, as older docs showed,
        counts as ``["csv"]``), lower-case, without dots."""
        given = self.meta.get("formats") or ([self.meta["format"]] if self.kind == "data_processor" and
                                             self.meta.get("format") else ())
        return tuple(str(f).lower().lstrip(".") for f in given)

    @property
    def format(self) -> str | None:
        """The format an exporter writes (``format=...``), if any."""
        return self.meta.get("format")

    @property
    def description(self) -> str:
        """A one-line description (empty when the plugin gave none)."""
        return str(self.meta.get("description", ""))

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other names this component answers to."""
        return tuple(self.meta.get("aliases", ()))

    @property
    def is_family(self) -> bool:
        """Whether this registration covers a family of names (``"timm/*"`` answers ``"timm/resnet26d"``,
        ``"llama-*"`` answers ``"llama-1b"``)."""
        return self.name.endswith(("/*", "-*"))

    @property
    def variant(self) -> str | None:
        """For a family resolved from a concrete name, the part after the prefix (``"resnet26d"``)."""
        return self.meta.get("variant")

    @property
    def defaults(self) -> dict[str, Any]:
        """Hyperparameters implied by the name: ``{variant_param: variant}`` for a resolved family."""
        param = self.meta.get("variant_param")
        return {param: self.variant} if param and self.variant else {}

    @property
    def target_path(self) -> str:
        """The target as ``"module:attr"`` text, without importing it."""
        if isinstance(self.target, str):
            return self.target
        module = getattr(self.target, "__module__", type(self.target).__module__)
        qualname = getattr(self.target, "__qualname__", type(self.target).__qualname__)
        return f"{module}:{qualname}"

    def load(self) -> Any:
        """Import the target (once) and return it.

        Raises:
            PluginLoadError: the target cannot be imported; the message names the plugin.
        """
        if not self._loaded:
            if isinstance(self.target, str):
                try:
                    obj = import_target(self.target)
                except PluginLoadError as err:
                    raise PluginLoadError(f"{self.kind} '{self.qualified_name}': {err}") from err
            else:
                obj = self.target
            self._loaded.append(obj)
        return self._loaded[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of the component (never imports the target)."""
        extra = {k: v for k, v in self.meta.items()
                 if k not in {"task", "format", "description", "aliases", "tasks", "kind", "name", "plugin", "target"}}
        return {
            "name": self.name,
            "kind": self.kind,
            "task": self.task,
            "tasks": list(self.tasks),
            "format": self.format,
            "plugin": self.plugin,
            "description": self.description,
            "target": self.target_path,
            "aliases": list(self.aliases),
            **{k: v for k, v in extra.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        }


def make_component(kind: str, plugin: str, name: Any, target: Any, meta: dict[str, Any]) -> Component:
    """Validate one ``register`` call and build its ``Component``.

    Raises:
        RegistrationError: a bad name, target, alias or missing required metadata; the message names the
            plugin, the component and the fix.
    """
    spec = KINDS[kind]
    where = f"plugin '{plugin}' registered {kind} {name!r}"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RegistrationError(
            f"{where}: a name must be a non-empty string of letters, digits, '-', '_', '.' or '/' "
            "(':' is reserved for 'plugin:name')"
        )
    if kind == "task":  # a task is its metadata: register(name, kind=..., description=...)
        if target is None:
            target = Task.from_registration(plugin, name, meta)
        elif not isinstance(target, Task) or target.name != name:
            raise RegistrationError(f"{where} with target {target!r}: pass kind=... (or a Task named {name!r})")
        meta = {"description": target.description, **meta}
    if isinstance(target, str):
        if not _TARGET_RE.match(target):
            raise RegistrationError(f"{where} with target {target!r}: write the target as 'package.module:attr'")
    elif target is None:
        raise RegistrationError(f"{where} with no target: pass 'package.module:attr' or the object")
    missing = [key for key in spec.required_meta if not meta.get(key)]
    if missing:
        raise RegistrationError(f"{where} without {', '.join(missing)}: pass {missing[0]}=... to register()")
    task = meta.get("task")
    if task is not None and not (
        isinstance(task, str) or (isinstance(task, (list, tuple)) and task and all(isinstance(t, str) for t in task))
    ):
        raise RegistrationError(f"{where}: task must be a task name or a list of them, got {task!r}")
    aliases = meta.get("aliases", ())
    if isinstance(aliases, str) or not all(isinstance(a, str) and _NAME_RE.match(a) for a in aliases):
        raise RegistrationError(f"{where}: aliases must be a list of names, got {aliases!r}")
    meta = {**meta, "aliases": tuple(aliases)} if aliases else dict(meta)
    return Component(kind=kind, name=name, plugin=plugin, target=target, meta=meta)
