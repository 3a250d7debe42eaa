"""What ``twinkle plugins list --json`` says about a plugin, as a fresh process sees it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def listed_plugin(name: str) -> dict[str, Any]:
    """Run ``twinkle plugins list --json --all`` in a new interpreter and return plugin ``name``'s entry.

    Raises:
        AssertionError: the command failed or does not list ``name``.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "plugins", "list", "--json", "--all"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    plugins = {entry["name"]: entry for entry in json.loads(proc.stdout)}
    assert name in plugins, f"'{name}' is not listed; listed: {', '.join(sorted(plugins))}"
    return plugins[name]
