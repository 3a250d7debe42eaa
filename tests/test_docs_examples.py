"""The public API page lists exactly the names the public modules export, each documented (the guides' code
blocks run in ``test_docs_site.py``)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins"
PUBLIC = ["twinkle_core", "twinkle_core.data", "twinkle_core.planning", "twinkle_core.exporting",
          "twinkle_core.tasks", "twinkle_core.types", "twinkle_core.errors", "twinkle_core.testing",
          "twinkle_core.hookspecs", "twinkle_core.lowlevel", "twinkle_core.pretrained", "twinkle_core.doctor"]



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
