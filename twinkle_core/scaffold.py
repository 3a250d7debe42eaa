"""``twinkle plugins new NAME``: create a ready-to-install plugin project from the bundled template."""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path

from twinkle_core.errors import TwinkleError

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


def plugin_names(name: str) -> dict[str, str]:
    """The names a plugin called ``name`` uses: distribution, package, entry point, class and task.

    Raises:
        TwinkleError: ``name`` is not lower-case letters and digits separated by '-' or '_'.
    """
    if not _NAME.match(name):
        raise TwinkleError(
            f"plugin name {name!r} is not valid: use lower-case letters and digits separated by '-' "
            "(for example 'acme' or 'acme-tabular')"
        )
    from twinkle_core import __version__

    parts = re.split(r"[-_]", name)
    return {
        "name": name,
        "dist": f"twinkle-{name}",
        "package": "twinkle_" + "_".join(parts),
        "cls": "".join(p.capitalize() for p in parts) + "Linear",
        "task": "_".join(parts) + "_classification",
        "core_version": __version__.split("+")[0],
        "core_range": core_range(__version__),
    }


def core_range(version: str) -> str:
    """The ``twinkle-core`` range a plugin made for core ``version`` declares: the same minor series.

    ``"0.2.1"`` gives ``">=0.2,<0.3"`` (while the major number is 0 a minor release may break the API) and
    ``"1.4.0"`` gives ``">=1.4,<2"``. A source tree's ``"0+unknown"`` (or any version that does not parse) gives ``""``.
    """
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return ""
    if parsed.release == (0,):  # "0+unknown": no release to be compatible with
        return ""
    major, minor = parsed.major, parsed.minor
    return f">={major}.{minor},<{major}.{minor + 1}" if major == 0 else f">={major}.{minor},<{major + 1}"


def create_plugin_project(name: str, directory: Path | str = ".") -> Path:
    """Write the plugin project ``twinkle-NAME`` under ``directory`` and return its root.

    Raises:
        TwinkleError: the name is invalid or the target folder already exists.
    """
    names = plugin_names(name)
    root = Path(directory) / names["dist"]
    if root.exists():
        raise TwinkleError(f"{root} already exists; choose another name or --directory")
    template = resources.files("twinkle_core") / "scaffold_template"
    for source, relative in _walk(template, ""):
        target = root / relative.replace("__package__", names["package"]).removesuffix(".tmpl")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(string.Template(source.read_text(encoding="utf-8")).substitute(names), encoding="utf-8")
    return root


def _walk(folder, prefix: str):  # type: ignore[no-untyped-def]
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                yield from _walk(entry, relative + "/")
        elif entry.name.endswith(".tmpl"):
            yield entry, relative
