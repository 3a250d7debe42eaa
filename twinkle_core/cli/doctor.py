"""``twinkle doctor``: what this installation has and lacks (``twinkle_core.doctor``)."""

from __future__ import annotations

import click

from twinkle_core.cli.output import echo_json

_MARKS = {"ok": "ok", "optional": "optional", "warn": "warn", "missing": "MISSING"}


@click.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(names: tuple[str, ...], as_json: bool) -> None:
    """Check this installation: Python, torch, devices (and native bf16), the run store, the offline settings and
    every installed plugin's native pieces — one line each, with the fix. NAMES runs only those checks
    (`twinkle checks list` lists them).

    Exits 1 when something an installed plugin or core needs is missing.
    """
    from twinkle_core import __version__
    from twinkle_core.doctor import exit_code, run_checks

    findings = run_checks(list(names) or None)
    if as_json:
        echo_json([f.to_dict() for f in findings])
    else:
        click.echo(f"twinkle doctor — twinkle-core {__version__}")
        width = max((len(f.name) for f in findings), default=0)
        for found in findings:
            fix = f"  → {found.fix}" if found.fix and found.status != "ok" else ""
            click.echo(f"  {_MARKS[found.status]:<8} {found.name:<{width}}  {found.detail}{fix}")
        missing = [f.name for f in findings if f.status == "missing"]
        click.echo(f"{len(missing)} missing: {', '.join(missing)}" if missing
                   else f"everything needed is here ({len(findings)} check{'' if len(findings) == 1 else 's'})")
    raise SystemExit(exit_code(findings))
