"""``twinkle doctor``: what this installation has and lacks, one line each, with the fix.

As Ultralytics' ``checks`` or ``flutter doctor``: the Python and torch builds, the devices and what they compute
natively, the run store, the offline settings, and every installed plugin's optional native pieces (a system
library, a program, a converter environment, an SDK). Each is a *check*: a callable registered through the
``register_checks`` hook (core registers its own the same way) that returns a ``Finding``. Checks import what they
look at only when they run, so listing them (``twinkle checks list``) imports nothing heavy.

A check's ``status`` is one of:

- ``ok``: present and working;
- ``optional``: not installed, and only an optional feature needs it (the finding says which, and how to add it);
- ``warn``: works, but not as it should (a setting left out, a slower path);
- ``missing``: something an installed plugin (or core) needs is absent or broken: ``twinkle doctor`` exits 1.

A plugin registers its own:

```python
@hookimpl
def register_checks(register):
    register("espeak-ng", "twinkle_audio.checks:espeak_ng", description="espeak-ng, MelOTTS's phonemizer")

# twinkle_audio/checks.py: a function whose docstring says what it looks at
def espeak_ng() -> Finding:
    path = shutil.which("espeak-ng")
    if path is None:
        return Finding("missing", "not on PATH", fix="apt-get install espeak-ng")
    return Finding("ok", path)
```
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Literal

Status = Literal["ok", "optional", "warn", "missing"]
STATUSES: tuple[str, ...] = ("ok", "optional", "warn", "missing")
"""Every status, from best to worst."""


@dataclass(frozen=True)
class Finding:
    """What one check found.

    Attributes:
        status: ``ok``, ``optional``, ``warn`` or ``missing`` (see the module's description).
        detail: what was found (a version, a path, a device) or what is wrong, in one line.
        fix: the command or setting that fixes a status other than ``ok`` (empty when there is nothing to do).
        name: the line's name (``twinkle doctor`` sets it from the registration: ``plugin: name``).
        plugin: the plugin whose check it is (set by ``twinkle doctor``).
    """

    status: Status
    detail: str
    fix: str = ""
    name: str = ""
    plugin: str = ""

    def __post_init__(self) -> None:
        """Refuse a status that is not one of ``STATUSES``."""
        if self.status not in STATUSES:
            raise ValueError(f"Finding status {self.status!r}: use one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


Check = Callable[[], Finding]
"""A check: called with no argument, returns its ``Finding`` (its docstring says what it looks at)."""


CORE_CHECKS: tuple[str, ...] = ("python", "torch", "devices", "plugins", "store", "offline", "onnxruntime",
                                 "tinker-sdk")
"""Core's checks, in the order they are shown (before every plugin's)."""


def run_checks(names: list[str] | None = None) -> list[Finding]:
    """Run every registered check (or those named ``names``, as listed by ``twinkle checks list``), core's first,
    then each plugin's in name order. A check that raises is reported as ``missing`` with its error, never raised.

    Raises:
        UnknownComponentError: a name no registered check has (with the close ones and every check's name).
    """
    import difflib

    from twinkle_core.errors import UnknownComponentError
    from twinkle_core.lookup import list_components

    def order(component: Any) -> tuple[bool, str, int, str]:
        core = component.plugin == "twinkle-core"
        rank = CORE_CHECKS.index(component.name) if core and component.name in CORE_CHECKS else len(CORE_CHECKS)
        return not core, component.plugin, rank, component.name

    components = sorted(list_components("check"), key=order)
    known = [n for c in components for n in (c.name, c.qualified_name)]
    unknown = [n for n in names or () if n not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=3, cutoff=0.5)
        raise UnknownComponentError(
            f"unknown check {', '.join(repr(n) for n in unknown)}"
            + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "")
            + f" The checks: {', '.join(c.name if c.plugin == 'twinkle-core' else c.qualified_name for c in components)}")
    findings = []
    for component in components:
        if names and component.name not in names and component.qualified_name not in names:
            continue
        label = component.name if component.plugin == "twinkle-core" else f"{component.plugin}: {component.name}"
        try:
            found = component.load()()
            if not isinstance(found, Finding):
                raise TypeError(f"returned {type(found).__name__}, not a twinkle_core.doctor.Finding")
        except Exception as err:  # noqa: BLE001 - a broken check is itself a finding
            found = Finding("missing", f"the check failed: {type(err).__name__}: {err}",
                            fix=f"report it to the authors of {component.plugin}")
        findings.append(replace(found, name=label, plugin=component.plugin))
    return findings


def exit_code(findings: list[Finding]) -> int:
    """1 when any finding is ``missing``, else 0."""
    return int(any(f.status == "missing" for f in findings))


# ------------------------------------------------------------------ core's own checks
def check_python() -> Finding:
    """The interpreter: its version, where it is, and whether it runs in a virtual environment."""
    version = ".".join(str(v) for v in sys.version_info[:3])
    where = f"{version} at {sys.executable}"
    if sys.version_info < (3, 10):
        return Finding("missing", f"{where}: Twinkle needs Python 3.10 or later", fix="use Python 3.11 (make setup)")
    if sys.prefix == sys.base_prefix:
        return Finding("warn", f"{where}, outside a virtual environment",
                       fix="source .venv/bin/activate (make setup makes it)")
    return Finding("ok", f"{where} (venv {sys.prefix})")


def check_torch() -> Finding:
    """torch: its version, its build (CUDA or CPU) and the threads it uses."""
    try:
        import torch
    except Exception as err:  # noqa: BLE001 - any import failure is the finding
        return Finding("missing", f"torch does not import: {type(err).__name__}: {err}",
                       fix="pip install torch==2.14.1 (make setup installs the pinned build)")
    build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
    threads = torch.get_num_threads()
    hint = f"; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}" if os.environ.get("OMP_NUM_THREADS") else ""
    return Finding("ok", f"{torch.__version__}, {build}; {threads} thread(s){hint}")


def check_devices() -> Finding:
    """The devices training can use and whether each computes bfloat16 natively."""
    from twinkle_core.planning.hardware import cpu_description

    cpu = cpu_description()
    parts = [f"cpu: {cpu.name}, {cpu.cores} core(s), "
             + (f"bf16 native ({', '.join(cpu.bf16_flags)})" if cpu.bf16_flags else "no native bf16")]
    try:
        import torch
    except Exception:  # noqa: BLE001 - torch's own check names the problem
        return Finding("warn", f"{parts[0]}; GPUs not looked for (torch does not import)", fix="see the torch line")
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            bf16 = "bf16 native" if torch.cuda.is_bf16_supported() else "no bf16"
            parts.append(f"cuda:{index} {props.name}, {props.total_memory / 2**30:.0f} GiB, {bf16}")
    elif torch.backends.mps.is_available():
        parts.append("mps (Apple GPU)")
    else:
        parts.append("no GPU")
    return Finding("ok", "; ".join(parts))


def check_store() -> Finding:
    """The run store (``$TWINKLE_HOME``, default ``~/.twinkle``): where it is and whether it can be written."""
    from twinkle_core.uris import twinkle_home

    home = twinkle_home()
    if "://" in home and not home.startswith("file://"):
        return Finding("ok", f"{home} (a remote store: reached when a run is written)")
    path = home.removeprefix("file://")
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK):
        return Finding("missing", f"{path} cannot be written ({existing} is not writable)",
                       fix="set TWINKLE_HOME to a folder you can write")
    catalogue = os.path.join(path, "catalogue.sqlite")
    state = "exists" if os.path.exists(catalogue) else "will be made at the first run"
    return Finding("ok", f"{path} (catalogue {state}; TWINKLE_HOME {'set' if os.environ.get('TWINKLE_HOME') else 'unset'})")


OFFLINE_SETTINGS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
}
"""Settings that keep third-party libraries from reaching a hub (Twinkle itself never downloads)."""


def check_offline() -> Finding:
    """The settings that keep libraries off the network. Twinkle itself loads only local folders (transformers with
    ``local_files_only``, ultralytics with its offline settings, applied when twinkle-vision loads it); these keep
    the libraries it uses from reaching a hub in the rest of the process too. ``warn`` when one is set to allow it."""
    allowed = [f"{k}={os.environ[k]}" for k, v in OFFLINE_SETTINGS.items() if os.environ.get(k) not in (None, v)]
    if allowed:
        return Finding("warn", f"{', '.join(allowed)}: libraries may reach the network (Twinkle itself never "
                               "downloads)", fix="export " + " ".join(f"{k}={v}" for k, v in OFFLINE_SETTINGS.items()))
    set_ = [f"{k}={v}" for k, v in OFFLINE_SETTINGS.items() if os.environ.get(k) == v]
    unset = [k for k in OFFLINE_SETTINGS if k not in os.environ]
    detail = "Twinkle loads local folders only"
    if set_:
        detail += f"; {', '.join(set_)}"
    if unset:
        detail += f"; unset: {', '.join(unset)} (export {unset[0]}={OFFLINE_SETTINGS[unset[0]]} to keep other code off the hub too)"
    return Finding("ok", detail)


def check_onnxruntime() -> Finding:
    """onnxruntime: export verification and ``twinkle predict model.onnx`` run with it."""
    try:
        import onnxruntime
    except Exception as err:  # noqa: BLE001
        return Finding("missing", f"onnxruntime does not import: {type(err).__name__}: {err}",
                       fix="pip install onnxruntime (a twinkle-core dependency)")
    return Finding("ok", f"{onnxruntime.__version__}; providers {', '.join(onnxruntime.get_available_providers())}")


def check_tinker_sdk() -> Finding:
    """The Tinker SDK (``twinkle-core[tinker]``): ``twinkle serve --tinker`` reads its wire schema."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("tinker")
    except PackageNotFoundError:
        return Finding("optional", "not installed: only `twinkle serve --tinker` needs it",
                       fix="pip install 'twinkle-core[tinker]'")
    return Finding("ok", found)


def check_plugins() -> Finding:
    """Every installed plugin loads (a plugin that fails is named with its error)."""
    from twinkle_core.plugins import get_plugin_set

    infos = get_plugin_set().infos()
    broken = [f"{i.name} ({i.error})" for i in infos if i.error]
    loaded = [f"{i.name} {i.version or ''}".strip() for i in infos if not i.error]
    if broken:
        return Finding("missing", f"{len(broken)} failed to load: {'; '.join(broken)}",
                       fix="reinstall the plugin, or see `twinkle plugins list`")
    return Finding("ok", ", ".join(loaded) if loaded else "none installed (core alone)")


__all__ = ["CORE_CHECKS", "STATUSES", "Check", "Finding", "Status", "exit_code", "run_checks"]
