"""Meta-tests: every hookspec is typed, documented in docs/plugins/hooks.md, and exercised by a test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from twinkle_core import hookimpl, hookspecs
from twinkle_core.components import KINDS
from twinkle_core.plugins import get_plugin_set

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins" / "hooks.md"


def _specs() -> dict[str, object]:
    return {
        name: func
        for name, func in vars(hookspecs).items()
        if callable(func) and hasattr(func, f"{hookspecs.PROJECT_NAME}_spec")
    }


def _signature(func) -> str:
    sig = inspect.signature(func)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"{func.__name__}({params}) -> {sig.return_annotation}"


def test_hook_names_cover_every_spec() -> None:
    """The hook names are the specs and the kinds; wherever the count of extension points is written (the hook
    reference, the README), it is theirs (the review found four, six and seven written for seven)."""
    assert set(_specs()) == set(hookspecs.HOOK_NAMES) == {kind.hook for kind in KINDS.values()}
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}
    count = words[len(hookspecs.HOOK_NAMES)]
    assert f"Twinkle has {count} extension points." in DOCS.read_text()
    readme = (DOCS.parents[2] / "README.md").read_text()
    assert f"{count} plugin extension points" in readme
    written = re.findall(r"\b(four|five|six|seven|eight|nine|ten)\b (?:plugin )?extension points",
                         readme + DOCS.read_text())
    assert set(written) == {count}


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_spec_is_typed_and_documented_with_an_example(name) -> None:
    func = _specs()[name]
    assert _signature(func) == f"{name}(register: Register) -> None"
    assert "For example:\n\n    ```python\n" in (func.__doc__ or "")  # a fenced example (Markdown, as the site renders)


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_docs_have_a_heading_with_the_exact_signature(name) -> None:
    headings = re.findall(r"^## `(.+)`(?: \{ #\w+ \})?$", DOCS.read_text(), flags=re.M)  # { #id }: its anchor
    assert _signature(_specs()[name]) in headings


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=lambda k: k.hook)
def test_each_hook_registers_its_kind(twinkle_plugin, kind) -> None:
    plugin = type("OneHook", (), {"__doc__": "A plugin implementing one hook."})

    def impl(self, register):
        """Register one component of this kind."""
        if kind.name == "task":  # a task is its metadata, no target
            register(f"meta-{kind.name}", kind="classification", description="a task")
        else:
            register(f"meta-{kind.name}", "meta_mod:Thing", task="tabular_classification", format="onnx")

    setattr(plugin, kind.hook, hookimpl(impl))
    info = twinkle_plugin(plugin(), name=f"meta-{kind.name}")
    assert info.hooks == [kind.hook]
    registry = get_plugin_set().registry
    assert [c.name for c in registry.list(kind.name, plugin=info.name)] == [f"meta-{kind.name}"]
    others = [k for k in KINDS if k != kind.name]
    assert all(not registry.list(k, plugin=info.name) for k in others)


def test_a_misspelt_hook_is_that_plugins_error(twinkle_plugin) -> None:
    from twinkle_core.errors import PluginError

    class Typo:
        """A plugin whose hook name lacks its final s."""

        @hookimpl
        def register_algorithm(self, register):
            """Never called."""

    with pytest.raises(PluginError, match="'register_algorithm' \\(did you mean 'register_algorithms'\\?\\)"):
        twinkle_plugin(Typo(), name="typo")
    assert "typo" not in {i.name for i in get_plugin_set().infos()}
    get_plugin_set().pm.check_pending()  # nothing of it is left behind
