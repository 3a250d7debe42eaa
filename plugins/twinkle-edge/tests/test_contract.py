"""The edge plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

from twinkle_core.testing import assert_plugin_contract, listed_plugin


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("edge")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    entry = listed_plugin("edge")
    assert (entry["distribution"], entry["version"], entry["error"]) == ("twinkle-edge", "0.1.0", None)
