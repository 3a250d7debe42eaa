"""The plugin contract as an allow-list: the twinkle_core modules a plugin may import (the public modules the API
reference documents), and import-linter's ``forbidden`` contract in ``pyproject.toml`` written from it — every other
module of twinkle_core, so that a new core module is private to plugins until it is made public.

    python tools/plugin_contract.py           # rewrite the contract in pyproject.toml
    python tools/plugin_contract.py --check   # exit 1 when it is not what the allow-list gives

(import-linter has no allow-list contract; this keeps one as data and derives its deny-list, as the project's
other generated files are derived: ``tools/api_reference.py``.)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_reference import CORE_MODULES  # noqa: E402  (this folder's tool: the public modules)

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "twinkle_core"
PYPROJECT = ROOT / "pyproject.toml"

PLUGINS = ("twinkle_vision", "twinkle_timeseries", "twinkle_audio", "twinkle_edge", "twinkle_llm")
"""The plugin packages the contract binds."""

ALLOWED: tuple[str, ...] = tuple(sorted(CORE_MODULES))
"""The modules plugins may import: core's public modules, those the API reference documents
(``tools/api_reference.py``'s ``CORE_MODULES``, one list for both) — each a package's ``__init__``, not the modules
inside it."""

NAME = "Plugins import only core's public modules (an allow-list: {names})"


def _modules(package: Path, dotted: str) -> list[str]:
    """Every module and package under ``package`` (dotted names), packages before what they hold."""
    out = []
    for entry in sorted(package.iterdir()):
        if entry.name.startswith(".") or entry.name in ("__init__.py", "__pycache__"):
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            out.append(f"{dotted}.{entry.name}")
            out.extend(_modules(entry, f"{dotted}.{entry.name}"))
        elif entry.suffix == ".py":
            out.append(f"{dotted}.{entry.stem}")
    return out


def forbidden() -> list[str]:
    """The deny-list the allow-list gives: each module not allowed, named at the highest package that holds no
    allowed module (a forbidden package forbids what it holds)."""
    out: list[str] = []
    for module in _modules(CORE, "twinkle_core"):
        if module in ALLOWED or any(module.startswith(f"{f}.") for f in out):
            continue
        if any(allowed.startswith(f"{module}.") for allowed in ALLOWED):
            continue  # holds an allowed module: its other modules are named one by one
        out.append(module)
    return out


def contract() -> str:
    """The contract's TOML, as ``pyproject.toml`` holds it."""
    short = ", ".join(a.removeprefix("twinkle_core") or "twinkle_core" for a in ALLOWED)
    lines = ["[[tool.importlinter.contracts]]", f'name = "{NAME.format(names=short)}"', 'type = "forbidden"',
             f"source_modules = [{', '.join(repr(p).replace(chr(39), chr(34)) for p in PLUGINS)}]",
             "forbidden_modules = [", *(f'    "{m}",' for m in forbidden()), "]", "allow_indirect_imports = true"]
    return "\n".join(lines) + "\n"


PATTERN = re.compile(r"\[\[tool\.importlinter\.contracts\]\]\nname = \"Plugins [^\n]*\n.*?allow_indirect_imports = "
                     r"true\n", re.S)


def main(argv: list[str] | None = None) -> int:
    """Rewrite or check the contract."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when pyproject.toml's contract is stale")
    args = parser.parse_args(argv)
    text = PYPROJECT.read_text()
    found = PATTERN.search(text)
    if found is None:
        print("pyproject.toml has no plugin contract (a contract named 'Plugins ...')", file=sys.stderr)
        return 1
    wanted = contract()
    if args.check:
        if found.group(0) != wanted:
            print("pyproject.toml's plugin contract is not what tools/plugin_contract.py's allow-list gives: run "
                  "python tools/plugin_contract.py (a new core module is forbidden to plugins until it is allowed "
                  "there)", file=sys.stderr)
            return 1
        return 0
    PYPROJECT.write_text(text[:found.start()] + wanted + text[found.end():])
    return 0


if __name__ == "__main__":
    sys.exit(main())
