"""The ``twinkle`` CLI: version, tables, JSON, filters and one-line user errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from twinkle_core import __version__, hookimpl
from twinkle_core.cli import main


class Catalogue:
    """A plugin with one component of each kind."""

    @hookimpl
    def register_algorithms(self, register):
        """Register."""
        register("cat-mlp", "cat_mod:MLP", task="tabular_classification", description="An MLP")
        register("cat-yolo", "cat_mod:Yolo", task="object_detection", description="A detector")

    @hookimpl
    def register_data_processors(self, register):
        """Register."""
        register("cat-csv", "cat_mod:CSV", task="tabular_classification", format="csv", description="CSV")

    @hookimpl
    def register_resource_strategies(self, register):
        """Register."""
        register("cat-plan", "cat_mod:Plan", description="A strategy")

    @hookimpl
    def register_exporters(self, register):
        """Register."""
        register("cat-onnx", "cat_mod:ONNX", format="onnx", description="ONNX")


@pytest.fixture
def cli(twinkle_plugin):
    twinkle_plugin(Catalogue(), name="catalogue")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args))


def test_version(cli) -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"twinkle, version {__version__}"


@pytest.mark.parametrize(
    ("group", "name", "column"),
    [
        ("algorithms", "cat-mlp", "tabular_classification"),
        ("data-processors", "cat-csv", "tabular_classification"),
        ("resource-strategies", "cat-plan", "catalogue"),
        ("exporters", "cat-onnx", "onnx"),
    ],
)
def test_every_kind_lists_as_table_and_json(cli, group, name, column) -> None:
    table = cli(group, "list", "cat-*")
    assert table.exit_code == 0, table.output
    header, *rows = table.output.splitlines()
    assert header.split()[:3] == ["NAME", "FORMAT" if group == "exporters" else "TASK", "PLUGIN"]
    assert any(row.startswith(name) and column in row for row in rows)
    data = json.loads(cli(group, "list", "cat-*", "--json").output)
    assert name in [row["name"] for row in data]
    assert set(data[0]) >= {"name", "task", "plugin", "description", "target"}


def test_algorithms_task_filter(cli) -> None:
    data = json.loads(cli("algorithms", "list", "--task", "object_detection", "--json").output)
    assert [row["name"] for row in data if row["plugin"] == "catalogue"] == ["cat-yolo"]
    assert all(row["task"] == "object_detection" for row in data)


def test_no_match_message(cli) -> None:
    result = cli("algorithms", "list", "nothing-like-this*")
    assert result.exit_code == 0
    assert result.output.strip() == "No algorithms match."


def test_plugins_table(cli) -> None:
    result = cli("plugins", "list")
    assert result.exit_code == 0
    row = next(line for line in result.output.splitlines() if line.startswith("catalogue"))
    assert "algorithms, data_processors" in row
    assert "2 algorithms, 1 data-processors, 1 resource-strategies, 1 exporters" in row


def test_user_error_is_one_line_without_traceback(cli) -> None:
    result = cli("plugins", "new", "Not Valid!")
    assert result.exit_code == 1
    assert result.output.startswith("Error: plugin name 'Not Valid!' is not valid")
    assert "Traceback" not in result.output
