"""The edge plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

from twinkle_core.testing import assert_plugin_contract, listed_plugin


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("edge")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    entry = listed_plugin("edge")
    assert (entry["distribution"], entry["version"], entry["error"]) == ("twinkle-edge", "0.1.0", None)


def test_twinkle_edge_is_a_plugin_command(tmp_path) -> None:
    import subprocess
    import sys

    run = lambda *a: subprocess.run([sys.executable, "-m", "twinkle_core", *a], capture_output=True, text=True,  # noqa: E731
                                    timeout=120)
    assert "edge " in run("--help").stdout  # listed after core's commands
    listed = run("edge", "targets")
    assert listed.returncode == 0 and "onnx-int8" in listed.stdout and "onnx " in listed.stdout
    bad = run("edge", "optimize", "twinkle://models/none", "--target", "rk9999")
    assert bad.returncode == 1 and "unknown target 'rk9999'" in bad.stderr and "Traceback" not in bad.stderr
    assert "edge" in run("commands", "list").stdout
