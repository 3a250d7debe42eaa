"""The authors' guides run: every ``python`` block of each page, in order, in a fresh interpreter; and the
public API page lists exactly the names the public modules export, each documented."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins"
PAGES = ["data-processor.md", "tasks.md", "algorithm.md"]
PUBLIC = ["twinkle_core", "twinkle_core.data", "twinkle_core.planning", "twinkle_core.exporting",
          "twinkle_core.tasks", "twinkle_core.types", "twinkle_core.errors", "twinkle_core.testing",
          "twinkle_core.hookspecs"]


def _blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_examples_run(page, tmp_path) -> None:
    code = "\n\n".join(_blocks(DOCS / page))
    assert code, f"{page} has no python example"
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "TWINKLE_HOME": str(tmp_path / "home"), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_the_api_page_lists_every_public_name_and_each_is_documented() -> None:
    text = (DOCS / "api.md").read_text()
    for module_name in PUBLIC:
        section = text.split(f"## `{module_name}`", 1)[1].split("\n## ", 1)[0]
        listed = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))
        module = importlib.import_module(module_name)
        assert listed == set(module.__all__), module_name
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module_name}.{name} has no docstring"
