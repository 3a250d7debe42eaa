"""Plugin discovery and loading.

Discovery has three phases, each as late as possible:

1. entry points of the ``twinkle`` group are read from installed package metadata;
2. a plugin module is imported, and its hooks called, the first time components are needed;
3. a component's ``module:attr`` target is imported only when that component is used.

A plugin that fails in phase 2 is reported — in ``twinkle plugins list`` and once on stderr — and
skipped. Before phase 2, a plugin's distribution is checked against the installed core: a plugin that requires
a ``twinkle-core`` range (``Requires-Dist: twinkle-core>=0.2,<0.3``) the installed core is outside of is not
imported at all, and is reported with an ``IncompatiblePluginError``. Environment
variables:

* ``TWINKLE_STRICT_PLUGINS=1``: re-raise a plugin's failure instead of skipping it;
* ``TWINKLE_LOAD_PLUGINS=a,b``: load only these entry-point plugins (set but empty: none);
* ``TWINKLE_DISABLED_PLUGINS=x,y``: never load these.

Core's own built-ins are a plugin like any other (named ``twinkle-core``), always loaded.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from twinkle_core import hookspecs
from twinkle_core.components import KINDS, Component, make_component
from twinkle_core.errors import IncompatiblePluginError, PluginError, PluginLoadError
from twinkle_core.registry import Registry

BUILTIN_PLUGIN = "twinkle-core"
"""Name under which core's own built-in components are registered."""

_BUILTIN_MODULE = "twinkle_core.builtins"


@dataclass
class PluginInfo:
    """What is known about one plugin, loaded or not.

    Attributes:
        name: the entry-point name (or the name given when registered in-process).
        distribution: the installed distribution that provides it, if any.
        version: that distribution's version.
        entry_point: ``"name = module"`` as written in the distribution's metadata.
        module: the plugin's module (or object) name.
        hooks: the hooks it implements.
        components: registered component names, by kind.
        error: why it failed to load, or ``None``.
        builtin: whether it is core's own plugin.
    """

    name: str
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    module: str | None = None
    hooks: list[str] = field(default_factory=list)
    components: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    builtin: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "name": self.name,
            "version": self.version,
            "distribution": self.distribution,
            "entry_point": self.entry_point,
            "module": self.module,
            "hooks": list(self.hooks),
            "components": {k: list(v) for k, v in self.components.items()},
            "error": self.error,
            "builtin": self.builtin,
        }


def _env_names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def strict_plugins() -> bool:
    """Whether ``TWINKLE_STRICT_PLUGINS`` asks for plugin failures to be raised."""
    return os.environ.get("TWINKLE_STRICT_PLUGINS", "").strip().lower() not in {"", "0", "false", "no"}


class PluginSet:
    """The loaded plugins and the registry of their components.

    Use ``get_plugin_set`` for the process-wide instance; tests build their own or register plugin
    objects in-process with ``register`` (see ``twinkle_core.testing``).
    """

    def __init__(self, *, load_entry_points: bool = True, load_builtins: bool = True) -> None:
        """Create the set; nothing is imported until ``load`` (or first use)."""
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self._components: dict[str, list[Component]] = {}
        self._load_entry_points = load_entry_points
        self._load_builtins = load_builtins
        self._loaded = False
        self._registry: Registry | None = None
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- loading
    def load(self) -> PluginSet:
        """Import every enabled plugin once (idempotent) and collect its components."""
        with self._lock:
            if self._loaded:
                return self
            self._loaded = True
            if self._load_builtins:
                import importlib

                info = PluginInfo(BUILTIN_PLUGIN, BUILTIN_PLUGIN, _dist_version(BUILTIN_PLUGIN), builtin=True)
                self._add(info, lambda: importlib.import_module(_BUILTIN_MODULE))
            if self._load_entry_points:
                for ep in entry_points():
                    if self._enabled(ep.name):
                        self._add(_info_from_entry_point(ep), _checked_loader(ep))
        return self

    def _enabled(self, name: str) -> bool:
        only = _env_names("TWINKLE_LOAD_PLUGINS")
        disabled = _env_names("TWINKLE_DISABLED_PLUGINS") or set()
        return name not in disabled and (only is None or name in only)

    def _add(self, info: PluginInfo, get_plugin: Any) -> None:
        if info.name in self._infos:
            self._fail(info, PluginError(f"another plugin is already named '{info.name}'"))
            return
        try:
            plugin = get_plugin()
            info.module = getattr(plugin, "__name__", type(plugin).__name__)
            self._register_checked(plugin, info.name)
        except Exception as err:  # a third party's import-time failure must not be fatal
            self._fail(info, err)
            return
        try:
            self._collect(info, plugin)
        except Exception as err:
            self.pm.unregister(plugin)
            self._fail(info, err)

    def _register_checked(self, plugin: Any, name: str) -> None:
        """Register ``plugin`` with pluggy, refusing hook implementations no Twinkle hook specifies.

        Raises:
            PluginError: a misspelt hook (``register_algorithm``), naming the plugin and the closest hook.
        """
        self.pm.register(plugin, name=name)
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as err:
            self.pm.unregister(plugin)
            unknown = sorted(
                attr for attr in dir(plugin)
                if attr.startswith("register") and attr not in hookspecs.HOOK_NAMES
                and self.pm.parse_hookimpl_opts(plugin, attr) is not None
            )
            import difflib

            hints = [f"'{u}' (did you mean '{(difflib.get_close_matches(u, hookspecs.HOOK_NAMES, n=1) or ['?'])[0]}'?)"
                     for u in unknown]
            raise PluginError(
                f"plugin '{name}' implements {', '.join(hints) or str(err)}, which is not a Twinkle hook; "
                f"the hooks are {', '.join(hookspecs.HOOK_NAMES)}"
            ) from None

    def _collect(self, info: PluginInfo, plugin: Any) -> None:
        """Call each hook the plugin implements with a ``register`` bound to it; all or nothing."""
        staged: list[Component] = []
        seen: dict[tuple[str, str], str] = {}
        for kind in KINDS.values():
            for impl in getattr(self.pm.hook, kind.hook).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                info.hooks.append(kind.hook)

                def register(name: str, target: Any = None, _kind: str = kind.name, **meta: Any) -> None:
                    comp = make_component(_kind, info.name, name, target, meta)
                    for key in (comp.name, *comp.aliases):
                        if (_kind, key) in seen:
                            raise PluginError(
                                f"plugin '{info.name}' registered {_kind} name '{key}' twice "
                                f"(for '{seen[(_kind, key)]}' and '{comp.name}'); use distinct names"
                            )
                        seen[(_kind, key)] = comp.name
                    staged.append(comp)

                impl.function(*[register for _ in impl.argnames])
        info.components = {}
        for comp in staged:
            info.components.setdefault(comp.kind, []).append(comp.name)
        self._components[info.name] = staged
        self._infos[info.name] = info
        self._registry = None

    def _fail(self, info: PluginInfo, err: BaseException) -> None:
        named = isinstance(err, IncompatiblePluginError) or not isinstance(err, PluginError)
        info.error = f"{type(err).__name__}: {err}" if named else str(err)
        info.hooks, info.components = [], {}
        self._infos.setdefault(info.name, info)
        self._registry = None
        label = f"{info.name} ({info.distribution} {info.version})" if info.distribution else info.name
        if strict_plugins():
            raise PluginLoadError(f"plugin {label} failed to load: {info.error}") from err
        print(
            f"twinkle: plugin {label} failed to load and is skipped: {info.error} "
            "(set TWINKLE_STRICT_PLUGINS=1 to raise)",
            file=sys.stderr,
        )

    # -------------------------------------------------------- in-process use
    def register(self, plugin: Any, name: str) -> PluginInfo:
        """Register a plugin object (a module, class or instance with hookimpls) in-process.

        Raises:
            PluginError: ``name`` is taken, or the plugin's hooks failed (always raised here).
        """
        with self._lock:
            self.load()
            if name in self._infos:
                raise PluginError(f"a plugin named '{name}' is already registered; pick another name")
            info = PluginInfo(name, module=getattr(plugin, "__name__", type(plugin).__name__))
            self._register_checked(plugin, name)
            try:
                self._collect(info, plugin)
            except Exception:
                self.pm.unregister(plugin)
                raise
            return info

    def unregister(self, name: str) -> None:
        """Remove a plugin registered with ``register`` (or any loaded plugin) by name."""
        with self._lock:
            plugin = self.pm.get_plugin(name)
            if plugin is not None:
                self.pm.unregister(plugin)
            self._infos.pop(name, None)
            self._components.pop(name, None)
            self._registry = None

    # --------------------------------------------------------------- queries
    def infos(self, include_builtin: bool = False) -> list[PluginInfo]:
        """Every plugin seen, loaded or broken, sorted by name."""
        self.load()
        return sorted(
            (i for i in self._infos.values() if include_builtin or not i.builtin), key=lambda i: i.name
        )

    @property
    def registry(self) -> Registry:
        """A registry of every loaded plugin's components (built once, rebuilt after a plugin is added or removed)."""
        self.load()
        with self._lock:
            if self._registry is None:
                registry = Registry(c for comps in self._components.values() for c in comps)
                registry.broken_plugins = {i.name: i.error for i in self._infos.values() if i.error}
                self._registry = registry
            return self._registry


def entry_points() -> list[metadata.EntryPoint]:
    """The installed entry points of the ``twinkle`` group (reads metadata only; imports nothing)."""
    seen: set[str] = set()
    found = []
    for ep in metadata.entry_points(group=hookspecs.PROJECT_NAME):
        if ep.name not in seen:  # the same distribution seen twice on sys.path
            seen.add(ep.name)
            found.append(ep)
    return found


def core_requirement(dist: metadata.Distribution) -> str | None:
    """The ``twinkle-core`` version range a distribution requires (``">=0.2,<0.3"``), or ``None`` if it names none.

    Requirements that apply only under an extra or another environment marker are ignored.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    for line in dist.requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == BUILTIN_PLUGIN and (req.marker is None or req.marker.evaluate({"extra": ""})):
            return str(req.specifier)
    return None


def check_compatible(dist: metadata.Distribution, core_version: str | None = None) -> None:
    """Refuse a plugin distribution whose declared ``twinkle-core`` range excludes the installed core.

    Args:
        dist: the plugin's installed distribution.
        core_version: the core version to check against (default: the installed ``twinkle-core``'s).

    Raises:
        IncompatiblePluginError: naming the plugin, its range, the installed core and both ways out.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    wanted = core_requirement(dist)
    core_version = core_version or _dist_version(BUILTIN_PLUGIN)
    if not wanted or core_version is None:
        return
    try:
        ok = SpecifierSet(wanted).contains(Version(core_version), prereleases=True)
    except InvalidVersion:
        return  # a source tree's "0+unknown" core cannot be compared; the import decides
    if not ok:
        name, version = dist.metadata["Name"], dist.version
        raise IncompatiblePluginError(
            f"{name} {version} supports twinkle-core{wanted}, but twinkle-core {core_version} is installed; "
            f"install a {name} release made for twinkle-core {core_version} (pip install --upgrade {name}) "
            f"or a twinkle-core it supports (pip install 'twinkle-core{wanted}')"
        )


def _checked_loader(ep: metadata.EntryPoint) -> Any:
    """``ep.load``, preceded by the ``twinkle-core`` range check of the entry point's distribution."""

    def load() -> Any:
        dist = getattr(ep, "dist", None)
        if dist is not None:
            check_compatible(dist)
        return ep.load()

    return load


def _info_from_entry_point(ep: metadata.EntryPoint) -> PluginInfo:
    dist = getattr(ep, "dist", None)
    return PluginInfo(
        name=ep.name,
        distribution=dist.metadata["Name"] if dist else None,
        version=dist.version if dist else None,
        entry_point=f"{ep.name} = {ep.value}",
        module=ep.module,
    )


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


_PLUGIN_SET: PluginSet | None = None
_SET_LOCK = threading.Lock()


def get_plugin_set() -> PluginSet:
    """The process-wide ``PluginSet``, loaded on first use."""
    global _PLUGIN_SET
    with _SET_LOCK:
        if _PLUGIN_SET is None:
            _PLUGIN_SET = PluginSet()
    return _PLUGIN_SET.load()


def reset_plugin_set() -> None:
    """Forget the process-wide set, so the next use rediscovers plugins (environment changes, tests)."""
    global _PLUGIN_SET
    with _SET_LOCK:
        _PLUGIN_SET = None
