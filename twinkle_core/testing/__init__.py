"""Helpers for testing Twinkle plugins, for plugin authors and for Twinkle's own tests.

* ``registered_plugin`` — a context manager that registers a plugin object in-process;
  the pytest fixture ``twinkle_plugin`` (installed automatically with twinkle-core) does the same for one
  test and cleans up afterwards.
* ``check_plugin_contract`` / ``assert_plugin_contract`` — the contract every plugin should meet
  (``CONTRACT_CHECKS``); call it from your plugin's own tests: ``assert_plugin_contract("myplugin")``;
* ``check_data_processor`` / ``assert_data_processor`` — a data processor run on your sample data as ``fit``,
  ``evaluate`` and ``predict`` run it (``predict`` reads data without labels);
* ``listed_plugin`` — the plugin's entry in ``twinkle plugins list --json``, seen by a fresh process;
* ``KillAtStep`` — a callback that SIGKILLs training at a chosen step (exact-resume tests); imported on
  first use (it needs Lightning, and this package loads with pytest);
* ``once`` / ``copy_of`` — work done once per test session and shared read-only by every pytest-xdist
  worker (a trained run, a built site), and a private copy of it for a test that changes it;
* ``run_script`` — ``python SCRIPT ARGS...`` in a process of its own, forked from a template that imported the
  Trainer once (a test that trains in a separate process skips 10–20 s of imports); ``warm_commands`` — the
  same for console scripts a shell runs (``twinkle train ...`` in a documentation page's shell block);
* ``ServiceRunner`` — ``twinkle serve`` on loopback ports, killed whole at the end (the fixture ``twinkle_service``
  gives one per test); imported on first use;
* the marker ``processes`` (declared by the pytest plugin): tests that start several busy processes themselves run
  one after another on one xdist worker (``--dist loadgroup``), never beside each other.
"""

from __future__ import annotations

from typing import Any

from twinkle_core.testing.contract import (
    CONTRACT_CHECKS,
    HEAVY_MODULES,
    ContractReport,
    assert_plugin_contract,
    check_plugin_contract,
)
from twinkle_core.testing.inprocess import registered_plugin
from twinkle_core.testing.listing import listed_plugin
from twinkle_core.testing.once import copy_of, once
from twinkle_core.testing.processors import assert_data_processor, check_data_processor
from twinkle_core.testing.scripts import run_script, warm_commands

__all__ = [
    "CONTRACT_CHECKS",
    "HEAVY_MODULES",
    "ContractReport",
    "KillAtStep",
    "ServiceRunner",
    "assert_data_processor",
    "assert_plugin_contract",
    "check_data_processor",
    "check_plugin_contract",
    "copy_of",
    "listed_plugin",
    "once",
    "registered_plugin",
    "run_script",
    "warm_commands",
]


def __getattr__(name: str) -> Any:
    """``KillAtStep`` and ``ServiceRunner``, imported on first use."""
    if name == "KillAtStep":
        from twinkle_core.testing.faults import KillAtStep

        return KillAtStep
    if name == "ServiceRunner":
        from twinkle_core.testing.service import ServiceRunner

        return ServiceRunner
    raise AttributeError(f"module 'twinkle_core.testing' has no attribute {name!r}")
