"""Small output helpers shared by the CLI commands: aligned tables and JSON."""

from __future__ import annotations

import json
from typing import Any, Sequence

import click

_MAX_CELL = 70


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    text = " ".join(str(value).split())
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def echo_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], empty: str) -> None:
    """Print ``rows`` as an aligned table of ``columns`` (headers upper-cased), or ``empty`` if none."""
    if not rows:
        click.echo(empty)
        return
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    click.echo("  ".join(col.upper().ljust(w) for col, w in zip(columns, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, default=str))
