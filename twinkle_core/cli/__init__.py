"""The ``twinkle`` command line.

Listing commands read plugin metadata and import plugin modules only — never torch — so they start in a
fraction of a second. Commands that train or export import the engine inside their bodies.
A :class:`~twinkle_core.errors.TwinkleError` is printed as one ``Error: ...`` line and exits 1.
"""

from __future__ import annotations

from typing import Any

import click

from twinkle_core.cli.launch import COMMANDS as LAUNCH_COMMANDS
from twinkle_core.cli.listing import add_component_groups, plugins
from twinkle_core.cli.ops import COMMANDS as OPS_COMMANDS
from twinkle_core.cli.runs import COMMANDS
from twinkle_core.cli.service import COMMANDS as SERVICE_COMMANDS
from twinkle_core.errors import TwinkleError


class TwinkleGroup(click.Group):
    """A click group that turns :class:`TwinkleError` into a one-line error without a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, reporting Twinkle's errors the way click reports usage errors."""
        try:
            return super().invoke(ctx)
        except TwinkleError as err:
            raise click.ClickException(str(err)) from err


@click.group(cls=TwinkleGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="twinkle-core", prog_name="twinkle")
def main() -> None:
    """Twinkle: name an algorithm, point at your data, and Twinkle does the engineering."""


main.add_command(plugins)
add_component_groups(main)
for _command in (*COMMANDS, *OPS_COMMANDS, *LAUNCH_COMMANDS, *SERVICE_COMMANDS):
    main.add_command(_command)


__all__ = ["TwinkleGroup", "main"]
