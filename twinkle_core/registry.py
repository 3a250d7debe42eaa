"""Lookup and listing of registered components, in the style of timm's ``list_models``.

The ``Registry`` holds what every loaded plugin registered. Names resolve exactly, then through
aliases, then case-insensitively; ``plugin:name`` picks one plugin's component when two share a name.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from typing import Iterable

from twinkle_core.components import KINDS, Component
from twinkle_core.errors import AmbiguousComponentError, UnknownComponentError

_MAX_LISTED = 40


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """``name``'s sort key with its runs of digits compared as numbers (timm's ``_natural_key``):
    ``resnet18 < resnet34 < resnet101``; letters compare case-insensitively."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in re.split(r"(\d+)", name) if part)


class Registry:
    """Every registered component of every loaded plugin, grouped by kind.

    Example:
        >>> reg = Registry()
        >>> reg.add(Component("algorithm", "mlp", "demo", "demo_mod:MLP", {"task": "tabular_classification"}))
        >>> [c.name for c in reg.list("algorithm", "m*")]
        ['mlp']
    """

    def __init__(self, components: Iterable[Component] = ()) -> None:
        """Create a registry holding ``components``."""
        self._by_kind: dict[str, list[Component]] = {kind: [] for kind in KINDS}
        self.broken_plugins: dict[str, str] = {}
        for component in components:
            self.add(component)

    def add(self, component: Component) -> None:
        """Add one component (its plugin has already been validated)."""
        self._by_kind[component.kind].append(component)

    def all(self, kind: str) -> list[Component]:
        """Every component of ``kind``, sorted by name — in natural order, numbers by value as timm's
        ``list_models`` sorts (``resnet18`` before ``resnet101``) — then plugin."""
        return sorted(self._by_kind[_check_kind(kind)], key=lambda c: (natural_key(c.name), c.plugin))

    def list(
        self,
        kind: str,
        pattern: str | Iterable[str] | None = None,
        *,
        task: str | None = None,
        plugin: str | None = None,
        exclude: str | Iterable[str] | None = None,
    ) -> list[Component]:
        """Components of ``kind`` whose name (or ``plugin:name``) matches the glob pattern(s).

        Args:
            kind: a component kind (``"algorithm"``, ...).
            pattern: one glob or several (``"resnet*"``, ``["yolov8*", "yolo11*"]``); ``None`` matches all.
            task: keep only components of this task (exact match or glob).
            plugin: keep only components of this plugin.
            exclude: glob(s) of names to drop.
        """
        patterns = _as_list(pattern)
        excludes = _as_list(exclude)
        found = []
        for comp in self.all(kind):
            names = (comp.name, comp.qualified_name)
            if patterns and not any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns):
                continue
            if excludes and any(fnmatch.fnmatchcase(comp.name, p) for p in excludes):
                continue
            if task is not None and not any(fnmatch.fnmatchcase(t, task) for t in comp.tasks or ("",)):
                continue
            if plugin is not None and comp.plugin != plugin:
                continue
            found.append(comp)
        return found

    def get(self, kind: str, name: str) -> Component:
        """Resolve ``name`` (or ``plugin:name``) to one component.

        Raises:
            AmbiguousComponentError: two plugins registered ``name``; the message names both and the fix.
            UnknownComponentError: nothing matches; the message lists close matches and installed choices.
        """
        comps = self.all(kind)
        plugin, _, bare = name.rpartition(":")
        if plugin:
            comps = [c for c in comps if c.plugin == plugin]
            if not comps:
                plugins = sorted({c.plugin for c in self.all(kind)})
                raise UnknownComponentError(
                    f"no installed plugin '{plugin}' registers {KINDS[kind].plural}; "
                    f"plugins with {KINDS[kind].plural}: {', '.join(plugins) or 'none'}"
                    + self._broken_hint()
                )
        named_family = next((c for c in comps if c.is_family and c.name == bare), None)
        if named_family is not None:  # "qwen3-*" is the listing's pattern of a family, not a name to build
            variants = [str(v) for v in named_family.meta.get("variants", ())]
            prefix = named_family.name[:-1]
            raise UnknownComponentError(
                f"'{name}' names the family {named_family.name} of plugin '{named_family.plugin}', not one "
                f"{kind.replace('_', ' ')}: give one of its names"
                + (" (" + ", ".join(f"'{prefix}{v}'" for v in variants) + ")" if variants else f" ('{prefix}...')"))
        if not any(c.name == bare or bare in c.aliases for c in comps):
            families = [c for c in comps if c.is_family and bare.startswith(c.name[:-1]) and len(bare) > len(c.name) - 1]
            if families:
                family = max(families, key=lambda c: len(c.name))
                variant = bare[len(family.name) - 1 :]
                variants = [str(v) for v in family.meta.get("variants", ())]
                if any(ch in variant for ch in "*?[]") or (variants and variant not in variants):
                    prefix = family.name[:-1]
                    close = difflib.get_close_matches(variant, variants, n=3, cutoff=0.4)
                    names = ", ".join(f"'{prefix}{v}'" for v in variants) if variants else f"'{prefix}<name>'"
                    raise UnknownComponentError(
                        f"unknown {kind.replace('_', ' ')} '{name}': the family '{family.name}' of plugin "
                        f"'{family.plugin}' has {names}"
                        + (f"; did you mean {', '.join(repr(prefix + c) for c in close)}?" if close else "")
                        + (f" (a pattern lists names: twinkle {KINDS[kind].plural} list '{name}')"
                           if any(ch in variant for ch in "*?[]") else ""))
                return dataclasses.replace(family, name=bare, meta={**family.meta, "variant": variant}, _loaded=[])
        for match in (
            lambda c: c.name == bare,
            lambda c: bare in c.aliases,
            lambda c: bare.lower() in {c.name.lower(), *(a.lower() for a in c.aliases)},
        ):
            hits = [c for c in comps if match(c)]
            if len(hits) == 1:
                return hits[0]
            if hits:
                raise AmbiguousComponentError(
                    f"{kind} '{name}' is registered by several plugins: "
                    + ", ".join(f"'{c.plugin}'" for c in hits)
                    + "; name the one you mean: "
                    + " or ".join(f"'{c.qualified_name}'" for c in hits)
                )
        raise UnknownComponentError(self._unknown_message(kind, name, comps))

    def _unknown_message(self, kind: str, name: str, comps: list[Component]) -> str:
        choices = sorted({c.name for c in comps})
        every_name = sorted({n for c in comps for n in (c.name, *c.aliases)})
        close = difflib.get_close_matches(name.rpartition(":")[2], every_name, n=5, cutoff=0.5)
        message = f"unknown {kind.replace('_', ' ')} '{name}'"
        if close:
            message += f"; did you mean {', '.join(repr(c) for c in close)}?"
        if choices:
            shown = ", ".join(choices[:_MAX_LISTED])
            more = f" and {len(choices) - _MAX_LISTED} more" if len(choices) > _MAX_LISTED else ""
            message += f" Installed: {shown}{more} (see 'twinkle {KINDS[kind].plural} list')."
        else:
            message += f" No {KINDS[kind].plural} are installed; install a plugin such as twinkle-vision."
        return message + self._broken_hint()

    def _broken_hint(self) -> str:
        if not self.broken_plugins:
            return ""
        return " Plugins that failed to load: " + "; ".join(
            f"'{name}' ({error})" for name, error in sorted(self.broken_plugins.items())
        )


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UnknownComponentError(f"unknown component kind '{kind}'; choose from {', '.join(KINDS)}")
    return kind


def _as_list(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [v for v in value if v]
