"""The llm plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

import twinkle_core
from twinkle_core.testing import assert_plugin_contract, listed_plugin


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("llm")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    entry = listed_plugin("llm")
    assert (entry["distribution"], entry["version"], entry["error"]) == ("twinkle-llm", twinkle_core.__version__, None)
