"""The edge plugin meets Twinkle's plugin contract and is listed by the CLI."""

from __future__ import annotations

import twinkle_core
from twinkle_core.testing import assert_plugin_contract, listed_plugin


def test_plugin_meets_contract() -> None:
    assert_plugin_contract("edge")


def test_plugin_is_listed_with_version_and_no_error() -> None:
    entry = listed_plugin("edge")
    assert (entry["distribution"], entry["version"], entry["error"]) == ("twinkle-edge", twinkle_core.__version__, None)


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


def test_exporters_list_shows_rknn_and_onnx_int8_with_their_targets() -> None:
    import json
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "twinkle_core", "exporters", "list", "--json"],
                            capture_output=True, text=True, timeout=120)
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert {"onnx", "torchscript", "rknn", "onnx-int8"} <= set(rows)
    assert {"rk3588", "rk3566", "rk3568", "rk3576", "rk3562", "rv1103", "rv1106"} <= set(rows["rknn"]["targets"])
    assert rows["onnx-int8"]["targets"] == ["cpu"] and rows["rknn"]["plugin"] == "edge"
    table = subprocess.run([sys.executable, "-m", "twinkle_core", "exporters", "list"], capture_output=True,
                           text=True, timeout=120).stdout
    assert "TARGETS" in table.splitlines()[0] and "rk3588" in table


def test_the_converter_venvs_installer_is_checked_before_anything_is_made(tmp_path, monkeypatch) -> None:
    """``twinkle edge setup --installer``: an unknown installer, or uv asked for but not installed, is a named error
    and leaves no venv behind."""
    import pytest

    from twinkle_core.errors import TwinkleError
    from twinkle_edge.rknn import venv

    monkeypatch.setenv("TWINKLE_RKNN_VENV", str(tmp_path / "rknn-venv"))
    with pytest.raises(TwinkleError, match="installer='conda': choose one of pip, uv"):
        venv.setup(force=True, installer="conda")
    monkeypatch.setattr(venv.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(venv.ConverterMissingError, match="uv is not installed here or on PATH; pip install uv"):
        venv.setup(force=True, installer="uv")
    assert not (tmp_path / "rknn-venv").exists()
