"""The plugin contract: checks any plugin's own tests run against itself.

``check_plugin_contract`` runs these checks (``CONTRACT_CHECKS``, in this order; its report names those it ran):

1. **loads** — the plugin is installed (or registered in-process) and its hooks run without error;
2. **imports nothing heavy when loaded** — importing its module and calling its hooks in a fresh interpreter imports
   none of ``HEAVY_MODULES`` (torch, lightning, timm, ultralytics, ...); run for an installed plugin (an entry
   point) only;
3. **every target imports and is the right kind** — a subclass of the hook's base class (``Algorithm``,
   ``DataProcessor``, ``ResourceStrategy``, ``Exporter``, ``TrainingBackend``), a ``Task``, a click command;
4. **its names are its own** — no name or alias is registered by another installed plugin;
5. **its tasks are registered** — every task it declares is registered (by itself, core or another installed
   plugin): exactly the check training makes, so a plugin that passes is one ``Trainer`` accepts;
6. **documented** — the plugin module, each hook implementation and each target have a docstring, and each
   component a ``description``;
7. **data processors take predict's call** — a processor's ``read_samples`` accepts
   ``read_samples(uri, spec, context, targets=False)``, the call ``predict`` makes (``evaluate`` leaves ``targets``
   at ``True``).

What a plugin may leave out, at a cost to its users, is noted rather than failed: a data processor without
``DataProcessor.read_samples`` (``evaluate`` and ``predict`` refuse its runs by name). Whether a processor's
``read_samples`` really reads data without labels needs data: ``check_data_processor`` runs it on the plugin's own.
"""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from dataclasses import dataclass, field

from twinkle_core.components import KINDS, Component, import_target
from twinkle_core.errors import PluginLoadError
from twinkle_core.plugins import PluginSet, get_plugin_set
from twinkle_core.tasks import Task

HEAVY_MODULES: tuple[str, ...] = (
    "torch",
    "torchvision",
    "lightning",
    "pytorch_lightning",
    "timm",
    "ultralytics",
    "onnx",
    "onnxruntime",
    "tensorflow",
    "pandas",
)
"""Modules a plugin must not import when it is loaded (only when a component is used)."""

CONTRACT_CHECKS: tuple[str, ...] = (
    "loads",
    "imports nothing heavy when loaded",
    "every target imports and is the right kind",
    "its names are its own",
    "its tasks are registered",
    "documented",
    "data processors take predict's call",
)
"""The checks of ``check_plugin_contract``, in the order it runs them (docs/plugins/testing.md lists the same)."""

PREDICT_CALL = "read_samples(uri, spec, context, targets=False)"
"""How ``predict`` calls a data processor's ``read_samples`` (``evaluate``: without ``targets``)."""

_LIGHTNESS_PROBE = """
import json, os, sys
from twinkle_core.plugins import PluginSet
plugin_set = PluginSet(load_builtins={builtin})
plugin_set.load()
heavy = {heavy!r}
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


@dataclass
class ContractReport:
    """The outcome of ``check_plugin_contract`` (or of ``check_data_processor``).

    Attributes:
        plugin: the plugin's name (or the data processor's).
        checked: the checks that ran (``CONTRACT_CHECKS``' titles, in order).
        problems: a line per violation; empty when the plugin meets the contract.
        notes: a line per optional step the plugin does not support (it still meets the contract).
        skipped: a line per check that did not run, and why.
        subject: what was checked, in words (``"plugin"``, ``"data processor"``).
    """

    plugin: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    subject: str = "plugin"

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def __str__(self) -> str:
        """A readable summary: one line per problem, or that the plugin meets the contract and by how many checks."""
        if self.ok:
            ran = len(self.checked)
            count = (f"{ran} checks" if not self.skipped else
                     f"{ran} of {ran + len(self.skipped)} checks; not run: {'; '.join(self.skipped)}")
            return (f"{self.subject} '{self.plugin}' meets the Twinkle plugin contract ({count})"
                    + "".join(f"\n  note: {n}" for n in self.notes))
        return f"{self.subject} '{self.plugin}' breaks the Twinkle plugin contract:\n" + "\n".join(
            f"  - {p}" for p in self.problems
        )


def check_plugin_contract(
    name: str,
    *,
    plugin_set: PluginSet | None = None,
    check_lightness: bool = True,
) -> ContractReport:
    """Check plugin ``name`` (an installed entry point, or one registered in-process) against the contract.

    Args:
        name: the plugin's name as listed by ``twinkle plugins list``.
        plugin_set: the set to look in (default: the process-wide one).
        check_lightness: run the fresh-interpreter import check (only for installed entry points).
    """
    plugin_set = plugin_set or get_plugin_set()
    report = ContractReport(name)
    info = {i.name: i for i in plugin_set.infos(include_builtin=True)}.get(name)
    if info is None:
        report.problems.append(f"no plugin named '{name}' is installed or registered")
        return report
    report.checked.append(CONTRACT_CHECKS[0])
    if info.error:
        report.problems.append(f"fails to load: {info.error}")
        return report
    if check_lightness and (info.entry_point or info.builtin):
        _check_lightness(name, info.builtin, report)
        report.checked.append(CONTRACT_CHECKS[1])
    else:
        why = "check_lightness=False" if not check_lightness else "run for an installed plugin (an entry point) only"
        report.skipped.append(f"{CONTRACT_CHECKS[1]}: {why}")
    plugin = plugin_set.pm.get_plugin(name)
    _check_docstrings(plugin, report)
    registry = plugin_set.registry
    tasks = {c.name for c in registry.all("task")}
    for kind in KINDS:
        for comp in registry.list(kind, plugin=name):
            _check_component(comp, report, tasks)
            _check_unique(comp, registry.all(kind), report)
    report.checked.extend(CONTRACT_CHECKS[2:])
    return report


def assert_plugin_contract(name: str, **kwargs: object) -> ContractReport:
    """Like ``check_plugin_contract``, but raise ``AssertionError`` listing every problem."""
    report = check_plugin_contract(name, **kwargs)  # type: ignore[arg-type]
    if not report.ok:
        raise AssertionError(str(report))
    return report


def _check_lightness(name: str, builtin: bool, report: ContractReport) -> None:
    import os

    env = {**os.environ, "TWINKLE_LOAD_PLUGINS": "" if builtin else name, "TWINKLE_STRICT_PLUGINS": "1"}
    code = _LIGHTNESS_PROBE.format(builtin=builtin, heavy=HEAVY_MODULES)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        report.problems.append(f"loading it in a fresh interpreter failed: {last}")
        return
    heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    if heavy:
        report.problems.append(
            f"loading it imports {', '.join(heavy)}; import heavy libraries inside the registered targets, "
            "not at the plugin module's top level"
        )


def _check_docstrings(plugin: object, report: ContractReport) -> None:
    if not inspect.getdoc(plugin):
        report.problems.append(f"the plugin object {getattr(plugin, '__name__', plugin)!r} has no docstring")
    for kind in KINDS.values():
        func = getattr(plugin, kind.hook, None)
        if func is not None and not inspect.getdoc(func):
            report.problems.append(f"hook implementation {kind.hook} has no docstring")


def _check_component(comp: Component, report: ContractReport, tasks: set[str]) -> None:
    where = f"{comp.kind} '{comp.name}'"
    if not comp.description:
        report.problems.append(f"{where} has no description=... in its register() call")
    for task in comp.tasks:
        if task not in tasks:
            report.problems.append(f"{where} declares unknown task '{task}'; known: {', '.join(sorted(tasks))}")
    try:
        target = comp.load()
    except PluginLoadError as err:
        report.problems.append(str(err))
        return
    if comp.kind == "task":
        if not isinstance(target, Task):
            report.problems.append(f"{where} is not a Task ({target!r})")
        return
    if comp.kind == "command":  # a click command or group object, with its help
        import click

        if not isinstance(target, click.Command):
            report.problems.append(f"{where} target {comp.target_path} is not a click command ({target!r})")
        elif not (target.help or target.short_help):
            report.problems.append(f"{where} target {comp.target_path} has no help text")
        return
    if comp.kind == "check":  # a function returning a doctor Finding, saying in its docstring what it looks at
        if not callable(target) or inspect.isclass(target):
            report.problems.append(f"{where} target {comp.target_path} is not a function ({target!r})")
        elif not inspect.getdoc(target):
            report.problems.append(f"{where} target {comp.target_path} has no docstring")
        return
    base = import_target(KINDS[comp.kind].base)
    if not (inspect.isclass(target) and issubclass(target, base)):
        report.problems.append(f"{where} target {comp.target_path} is not a subclass of {base.__qualname__}")
    elif not target.__dict__.get("__doc__"):
        report.problems.append(f"{where} target {comp.target_path} has no docstring")
    if comp.kind == "data_processor" and inspect.isclass(target):
        from twinkle_core.data.processor import DataProcessor

        if issubclass(target, DataProcessor) and target.read_samples is DataProcessor.read_samples:
            report.notes.append(f"{where} does not implement read_samples: evaluate and predict refuse its runs")
        elif issubclass(target, DataProcessor) and (problem := read_samples_call_problem(target)):
            report.problems.append(f"{where} target {comp.target_path}: {problem}")


def read_samples_call_problem(cls: type) -> str | None:
    """Why ``cls.read_samples`` cannot take the calls ``predict`` and ``evaluate`` make (``PREDICT_CALL``; without
    ``context``, as ``twinkle predict model.onnx`` calls it; without ``targets``), with the fix; ``None`` when it
    can."""
    try:
        signature = inspect.signature(cls.read_samples)  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # a builtin or a C callable: nothing to inspect
        return None
    calls = ((PREDICT_CALL, ("uri", "spec", "context"), {"targets": False}),
             ("read_samples(uri, spec, targets=False)", ("uri", "spec"), {"targets": False}),
             ("read_samples(uri, spec, context)", ("uri", "spec", "context"), {}))
    for text, args, kwargs in calls:
        try:
            signature.bind(cls, *args, **kwargs)
        except TypeError:
            shown = f"read_samples({_parameters(signature)})"
            if "targets" in kwargs:
                return (f"{shown} cannot take predict's call {text}; add the keyword '*, targets: bool = True' and, "
                        "when it is False, read every sample unlabelled ((input,) items)")
            return f"{shown} cannot take evaluate's call {text}; take (uri, spec, context=None, *, targets=True)"
    return None


def _parameters(signature: inspect.Signature) -> str:
    """A signature's parameters by name (defaults shown, annotations left out)."""
    shown, starred = [], False
    for param in signature.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            shown.append(f"*{param.name}")
            starred = True
            continue
        if param.kind is param.KEYWORD_ONLY and not starred:
            shown.append("*")
            starred = True
        prefix = "**" if param.kind is param.VAR_KEYWORD else ""
        default = "" if param.default is param.empty else f"={param.default!r}"
        shown.append(f"{prefix}{param.name}{default}")
    return ", ".join(shown)


def _check_unique(comp: Component, same_kind: list[Component], report: ContractReport) -> None:
    mine = {comp.name, *comp.aliases}
    for other in same_kind:
        if other.plugin == comp.plugin:
            continue
        clash = mine & {other.name, *other.aliases}
        if clash:
            report.problems.append(
                f"{comp.kind} name {', '.join(sorted(clash))} is also registered by plugin '{other.plugin}'"
            )
