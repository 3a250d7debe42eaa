"""The edge plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

from twinkle_core.testing import assert_plugin_contract


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("edge")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "twinkle_core", "plugins", "list", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    plugin = {p["name"]: p for p in json.loads(out)}["edge"]
    assert plugin["distribution"] == "twinkle-edge"
    assert plugin["version"] == "0.1.0"
    assert plugin["error"] is None
