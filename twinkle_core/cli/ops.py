"""``twinkle tune`` and ``twinkle verify-data``."""

from __future__ import annotations

from typing import Any

import click

from twinkle_core.cli.options import hyperparams_from
from twinkle_core.cli.output import echo_json
from twinkle_core.errors import TwinkleError


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_space(items: tuple[str, ...]) -> dict[str, Any]:
    """``lr=1e-5:1e-3`` → a range ``(1e-5, 1e-3)``; ``batch_size=32,64,128`` → choices ``[32, 64, 128]``.

    Raises:
        TwinkleError: an item that is neither form, named with an example.
    """
    space: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TwinkleError(f"--space takes key=low:high or key=a,b,c, got {item!r} (e.g. --space lr=1e-5:1e-3)")
        if ":" in value and "," not in value:
            low, _, high = value.partition(":")
            space[key.strip()] = (_number(low.strip()), _number(high.strip()))
        else:
            space[key.strip()] = [_number(v.strip()) for v in value.split(",") if v.strip()]
    return space


@click.command()
@click.argument("algorithm")
@click.option("--data", "-d", required=True, help="Data path or URI.")
@click.option("--space", "-s", "space", multiple=True, required=True, metavar="KEY=LOW:HIGH|A,B,C",
              help="A range (log-uniform if it spans 10×) or a list of choices; repeatable.")
@click.option("--trials", "-n", default=20, show_default=True, help="Trials in the study (a resumed study counts its finished ones).")
@click.option("--task", "-t", help="The task (default: the algorithm's).")
@click.option("--hp", "hp", multiple=True, metavar="KEY=VALUE", help="A fixed hyperparameter; repeatable.")
@click.option("--epochs", type=int, help="Shorthand for --hp max_epochs=N.")
@click.option("--seed", default=0, show_default=True, help="Sampler seed.")
@click.option("--project", help="Run store project (trials go to PROJECT-tune).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def tune(algorithm: str, data: str, space: tuple[str, ...], trials: int, task: str | None, hp: tuple[str, ...],
         epochs: int | None, seed: int, project: str | None, as_json: bool) -> None:
    """Tune ALGORITHM's hyperparameters on --data with Optuna (TPE, pruning, resumable)."""
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    trainer = Trainer(algorithm, task, hyperparams_from(hp, epochs), project=project, verbose=False)
    result = trainer.tune(parse_space(space), max_trials=trials, data=data, seed=seed)
    summary = {"best_params": result.best_params, "best_value": result.best_value, "metric": result.metric,
               "completed": result.completed, "pruned": result.pruned, "study": result.study_name,
               "history_png": result.history_png, "best_run": result.best_run}
    if as_json:
        echo_json(summary)
        return
    click.echo(f"Best {result.metric} = {result.best_value:.6g} with {result.best_params}")
    click.echo(f"{result.completed} finished, {result.pruned} pruned trials; best run {result.best_run}")
    click.echo(f"History: {result.history_png}")


@click.command("verify-data")
@click.argument("uri")
@click.option("--md5", "expected", help="The expected fingerprint (hex, or md5:hex).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def verify_data(uri: str, expected: str | None, as_json: bool) -> None:
    """Fingerprint URI (a file or folder); with --md5, fail naming changed, added and removed files."""
    from twinkle_core.ops.verify import describe
    from twinkle_core.ops.verify import verify_data as verify

    result = verify(uri, expected)
    if as_json:
        echo_json(describe(result))
    else:
        click.echo(f"md5:{result.md5}  {result.files} file(s)  {uri}" + ("  OK" if expected else ""))


COMMANDS = (tune, verify_data)
"""The operations commands, added to the ``twinkle`` group."""
