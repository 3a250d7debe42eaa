"""The audio plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

import twinkle_core
from twinkle_core.testing import assert_plugin_contract, listed_plugin


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("audio")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    entry = listed_plugin("audio")
    assert (entry["distribution"], entry["version"], entry["error"]) == ("twinkle-audio", twinkle_core.__version__, None)
