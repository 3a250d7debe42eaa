"""The ``twinkle`` command line.

Listing commands read plugin metadata and import plugin modules only — never torch — so they start in a
fraction of a second. Commands that train or export import the engine inside their bodies.
A ``TwinkleError`` is printed as one ``Error: ...`` line and exits 1.
"""

from __future__ import annotations

from typing import Any

import click

from twinkle_core.cli.doctor import doctor
from twinkle_core.cli.launch import COMMANDS as LAUNCH_COMMANDS
from twinkle_core.cli.listing import add_component_groups, plugins
from twinkle_core.cli.ops import COMMANDS as OPS_COMMANDS
from twinkle_core.cli.runs import COMMANDS
from twinkle_core.cli.service import COMMANDS as SERVICE_COMMANDS
from twinkle_core.errors import TwinkleError


class TwinkleGroup(click.Group):
    """A click group that turns ``TwinkleError`` into a one-line error without a traceback, and that
    also offers the commands plugins register (``register_commands``), imported only when one is run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Core's commands, then the plugins' (a plugin's command never hides one of core's)."""
        own = super().list_commands(ctx)
        return own + sorted(name for name in _plugin_commands() if name not in own)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Core's command ``cmd_name``, else the plugin command of that name (imported now)."""
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in _plugin_commands():
            return command
        from twinkle_core.lookup import load_component

        loaded = load_component("command", cmd_name)
        if not isinstance(loaded, click.Command):
            raise click.ClickException(f"plugin command '{cmd_name}' is not a click command ({loaded!r})")
        return loaded

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, reporting Twinkle's errors the way click reports usage errors."""
        try:
            return super().invoke(ctx)
        except TwinkleError as err:
            raise click.ClickException(str(err)) from err


def _plugin_commands() -> list[str]:
    """Names of the commands installed plugins register (their modules are not imported)."""
    from twinkle_core.lookup import list_components

    try:
        return [c.name for c in list_components("command")]
    except TwinkleError:  # a broken plugin set: core's commands still work, 'twinkle plugins list' says why
        return []


@click.group(cls=TwinkleGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="twinkle-core", prog_name="twinkle")
def main() -> None:
    """Twinkle: name an algorithm, point at your data, and Twinkle does the engineering."""


main.add_command(plugins)
main.add_command(doctor)
add_component_groups(main)
for _command in (*COMMANDS, *OPS_COMMANDS, *LAUNCH_COMMANDS, *SERVICE_COMMANDS):
    main.add_command(_command)


__all__ = ["TwinkleGroup", "main"]
