"""The public API page lists exactly the names the public modules export, each documented (the guides' code
blocks run in ``test_docs_site.py``)."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins"
sys.path.insert(0, str(DOCS.parents[1] / "tools"))
from plugin_contract import ALLOWED  # noqa: E402  (the public modules: one list)

PUBLIC = [m for m in ALLOWED if m != "twinkle_core.client"]
"""The modules this page documents: the public ones but the service's client (its own reference page)."""



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
