"""The shape of the code, as the tools see it: no module imports another module's ``_private`` names, and a plugin
imports only the parts of core that are its public API. (Import direction and circles are import-linter's: its
layers contract runs first in ``make test``.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "twinkle_core", *sorted(p for p in (ROOT / "plugins").glob("*/twinkle_*") if p.is_dir())]

sys.path.insert(0, str(ROOT / "tools"))
from plugin_contract import ALLOWED  # noqa: E402  (the one list: the modules docs/plugins/api.md documents)

PLUGIN_API: tuple[str, ...] = ALLOWED
"""What a plugin may import of core: the public modules (each a package's ``__init__``, not what is inside it),
the same list import-linter's plugin contract is written from (``tools/plugin_contract.py``)."""


def imports(package: Path) -> list[tuple[Path, int, str, list[str]]]:
    """``(file, line, module, names)`` of every ``from X import ...`` of a project module under ``package``,
    relative imports resolved."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = parts[: len(parts) - node.level] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                if module.split(".")[0].startswith("twinkle_"):
                    found.append((path, node.lineno, module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(path, node.lineno, a.name, []) for a in node.names if a.name.startswith("twinkle_")]
    return found


def test_no_module_imports_a_private_name_of_another_module() -> None:
    """A name that starts with one underscore belongs to its module: another module importing it is reaching
    into state the owner may change (the fix: make it public, or move it where both can use it)."""
    offending = [f"{path.relative_to(ROOT)}:{line}: {name} from {module}"
                 for package in PACKAGES for path, line, module, names in imports(package)
                 for name in names if name.startswith("_") and not name.startswith("__")]
    assert not offending, "\n".join(offending)


def test_plugins_import_only_cores_public_api() -> None:
    """Every import of core by a plugin is of a module listed in :data:`PLUGIN_API`."""
    def public(module: str) -> bool:
        return module in PLUGIN_API

    offending = [f"{path.relative_to(ROOT)}:{line}: {module}" for package in PACKAGES[1:]
                 for path, line, module, _ in imports(package)
                 if module.startswith("twinkle_core") and not public(module)]
    assert not offending, "\n".join(offending)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The scan finds a private import, a relative one included, and a plugin's import of a core internal."""
    package = tmp_path / "twinkle_fake"
    package.mkdir()
    (package / "a.py").write_text("from twinkle_core.trainer import Trainer\nfrom .b import _helper\n")
    (package / "b.py").write_text("def _helper():\n    pass\n")
    found = {(module, tuple(names)) for _, _, module, names in imports(package)}
    assert found == {("twinkle_core.trainer", ("Trainer",)), ("twinkle_fake.b", ("_helper",))}
