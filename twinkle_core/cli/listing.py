"""``twinkle plugins ...`` and ``twinkle <components> list`` commands."""

from __future__ import annotations

from pathlib import Path

import click

from twinkle_core.cli.output import echo_json, echo_table
from twinkle_core.components import KINDS
from twinkle_core.plugins import get_plugin_set


@click.group()
def plugins() -> None:
    """Installed plugins: list them, or start a new one."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Include core's built-in plugin.")
def plugins_list(as_json: bool, show_all: bool) -> None:
    """List installed plugins with their version, hooks, components and load errors."""
    infos = [info.to_dict() for info in get_plugin_set().infos(include_builtin=show_all)]
    if as_json:
        echo_json(infos)
        return
    for row in infos:
        row["components"] = ", ".join(
            f"{len(names)} {KINDS[kind].plural}" for kind, names in row["components"].items()
        )
        row["hooks"] = ", ".join(h.removeprefix("register_") for h in row["hooks"])
    echo_table(
        infos,
        ["name", "version", "distribution", "hooks", "components", "error"],
        "No plugins installed (try: pip install twinkle-vision).",
    )


@plugins.command("new")
@click.argument("name")
@click.option(
    "--directory",
    "-d",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where to create the plugin's folder.",
)
def plugins_new(name: str, directory: Path) -> None:
    """Create a ready-to-install plugin project named twinkle-NAME from the template."""
    from twinkle_core.scaffold import create_plugin_project

    root = create_plugin_project(name, directory)
    click.echo(f"Created {root}")
    click.echo(f"Next: pip install -e {root} && twinkle plugins list && pytest {root}")


def _component_group(kind: str) -> click.Group:
    spec = KINDS[kind]
    label = spec.plural.replace("-", " ")

    @click.group(name=spec.plural, help=f"Registered {label}.")
    def group() -> None:
        pass

    @group.command("list", help=f"List registered {label}, optionally filtered by a glob PATTERN and task.")
    @click.argument("pattern", required=False)
    @click.option("--task", "-t", help="Only this task (a glob is allowed).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    def list_cmd(pattern: str | None, task: str | None, as_json: bool) -> None:
        comps = get_plugin_set().registry.list(kind, pattern, task=task)
        if kind == "task":  # a task is its metadata (nothing to import)
            rows = [{**c.load().to_dict(), "plugin": c.plugin} for c in comps]
            columns = ["name", "kind", "monitor", "mode", "plugin", "description"]
        else:
            rows = [c.to_dict() for c in comps]
            columns = ["name", "format" if kind == "exporter" else "task", "plugin", "description", "target"]
        if as_json:
            echo_json(rows)
            return
        if kind == "exporter":  # the devices each exporter converts for, when its plugin names them
            columns.insert(3, "targets")
            for row in rows:
                row["targets"] = ", ".join(row.get("targets") or [])
        for row in rows:
            row.setdefault("task", row.get("tasks"))
            if "tasks" in row:
                row["task"] = row["tasks"]
        filtered = pattern is not None or task is not None
        echo_table(rows, columns, f"No {label} match." if filtered else f"No {label} are registered.")

    return group


def add_component_groups(cli: click.Group) -> None:
    """Add one ``<kind> list`` group per component kind to ``cli``."""
    for kind in KINDS:
        cli.add_command(_component_group(kind))
