"""The plugin author's pages (docs/plugins/*.md) and the hooks' docstrings say what the code does: every example
``register`` call is one the registry accepts, with the keys it reads and targets that exist; every ``twinkle``
option they name exists; every data processor's sample ids are described. (``test_docs_site.py`` runs the pages'
code, the tutorial's commands included; ``test_contract.py`` holds the contract's checks to the testing page.)"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
from pathlib import Path

import click
import pytest

import twinkle_core.hookspecs as hookspecs
from twinkle_core.components import KINDS, make_component
from twinkle_core.lookup import list_components

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "plugins").glob("*.md"))
_PYTHON = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)
_HOOK_KIND = {kind.hook: kind.name for kind in KINDS.values()}


def _examples() -> list[tuple[str, str]]:
    """``(where, code)`` of every Python example of the plugin pages and of the hook specifications' docstrings."""
    found = [(page.name, code) for page in PAGES for code in _PYTHON.findall(page.read_text())]
    docstrings = [("hookspecs", hookspecs.__doc__ or "")]
    docstrings += [(f"hookspecs.{name}", getattr(hookspecs, name).__doc__ or "") for name in dir(hookspecs)
                   if name.startswith("register_")]
    for where, doc in docstrings:
        found += [(where, code) for code in _PYTHON.findall(inspect.cleandoc(doc))]
    return found


def _register_calls() -> list[tuple[str, str, ast.Call]]:
    """``(where, kind, call)`` for every ``register(...)`` call inside a ``register_<kind>`` hook of the examples."""
    calls = []
    for where, code in _examples():
        for hook in ast.walk(ast.parse(code)):
            if isinstance(hook, ast.FunctionDef) and hook.name in _HOOK_KIND:
                calls += [(where, _HOOK_KIND[hook.name], node) for node in ast.walk(hook)
                          if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register"]
    return calls


def _defines(target: str) -> bool:
    """Whether ``"package.module:attr"`` names something its module defines (read, not imported)."""
    module, _, attr = target.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return False
    tree = ast.parse(Path(spec.origin).read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    names |= {(a.asname or a.name) for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    return attr.split(".")[0] in names


def test_every_example_registration_is_one_the_registry_accepts_with_the_keys_it_reads() -> None:
    """Each ``register(...)`` of the plugin pages and the hookspec docstrings is accepted by ``make_component`` (the
    registry's own validation); a data processor gives its suffixes as ``formats=[...]`` — the key processor
    selection reads — never ``format=`` (which hooks.md and hookspecs showed); and a target in a first-party package
    names a module and attribute that exist."""
    calls = _register_calls()
    assert {kind for _, kind, _ in calls} >= {"task", "algorithm", "data_processor", "resource_strategy", "exporter",
                                              "command", "training_backend"}
    wrong = []
    for where, kind, call in calls:
        name = ast.literal_eval(call.args[0])
        target = call.args[1] if len(call.args) > 1 else None
        literal = ast.literal_eval(target) if isinstance(target, ast.Constant) else (None if target is None else object)
        meta = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        make_component(kind, "docs", name, literal, meta)  # raises RegistrationError naming what is wrong
        if kind == "data_processor" and ("format" in meta or not meta.get("formats")):
            wrong.append(f"{where}: data processor {name!r} registered with {sorted(meta)}: pass formats=[...]")
        first_party = isinstance(literal, str) and literal.split(".")[0] in {"twinkle_core", "twinkle_vision",
                                                                             "twinkle_timeseries", "twinkle_audio",
                                                                             "twinkle_edge", "twinkle_llm"}
        if first_party and not _defines(literal):
            wrong.append(f"{where}: {kind} {name!r} names {literal}, which does not exist")
    assert not wrong, "\n".join(wrong)


def test_a_processor_registered_with_the_old_format_key_is_still_selected_by_its_suffix(twinkle_plugin) -> None:
    """A plugin written from the old hooks.md (``format="jsonl"`` for a processor) reads as ``formats=["jsonl"]``:
    its processor is picked by the suffix, not ignored as one that reads anything."""
    from twinkle_core import hookimpl
    from twinkle_core.lookup import get_component

    class OldPage:
        """A plugin registered as hooks.md used to show."""

        @hookimpl
        def register_data_processors(self, register):
            """Register."""
            register("old-jsonl", "json:JSONDecoder", task="tabular_classification", format="jsonl",
                     description="x")

    twinkle_plugin(OldPage(), name="old-page")
    assert get_component("data_processor", "old-jsonl").formats == ("jsonl",)


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_twinkle_option_the_pages_name_exists() -> None:
    """Each ``twinkle <command> ... --option`` written on a plugin page is an option of that command (the data
    processor page said ``twinkle train --set KEY=VALUE``; the option is ``--hp``)."""
    from twinkle_core.cli import main

    ctx = click.Context(main)
    wrong, seen = [], 0
    for page in PAGES:
        for line in re.findall(r"twinkle [a-z][^`\n|]*", page.read_text()):
            words, command = line.split()[1:], main
            while words and isinstance(command, click.Group) and command.get_command(ctx, words[0]) is not None:
                command = command.get_command(ctx, words.pop(0))
            if command is main:
                continue
            for option in (w.split("=")[0].strip("[]`'\",.;:)") for w in words if w.lstrip("[").startswith("--")):
                seen += 1
                if option not in _options(command):
                    wrong.append(f"{page.name}: '{line.strip()}': {command.name} has no {option} "
                                 f"({', '.join(sorted(_options(command)))})")
    assert seen and not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", ["data-processor.md"])
def test_every_data_processor_says_what_its_sample_ids_are(page: str) -> None:
    """The data processor page's table of sample ids (what ``predict`` writes beside each row) has a row for every
    installed data processor, by its registered name — not only "a table's data-row number"."""
    text = (ROOT / "docs" / "plugins" / page).read_text()
    table = text.split("### Sample ids", 1)[1].split("\n#", 1)[0]
    described = set(re.findall(r"^\| `([\w-]+)`", table, flags=re.M))
    installed = {c.name for c in list_components("data_processor")}
    assert installed <= described, f"no sample ids described for {sorted(installed - described)}"
