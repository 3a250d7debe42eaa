"""``twinkle edge``: the edge toolchain from the command line (registered through ``register_commands``).

Light at import: the optimizer (torch, torch-pruning) is imported when a command runs.
"""

from __future__ import annotations

import json

import click


@click.group()
def edge() -> None:
    """Prune, fine-tune back, quantize and measure trained models for edge devices."""


@edge.command("targets")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def targets(as_json: bool) -> None:
    """The targets EdgeOptimizer converts for."""
    from twinkle_edge.targets import TARGETS

    if as_json:
        click.echo(json.dumps(TARGETS, indent=2))
        return
    width = max(len(name) for name in TARGETS)
    for name, info in sorted(TARGETS.items()):
        click.echo(f"{name.ljust(width)}  {info['description']}")


@edge.command("setup")
@click.option("--force", is_flag=True, help="Make it again even when it is up to date.")
@click.option("--installer", type=click.Choice(["pip", "uv"]), default="pip", show_default=True,
              help="What installs its packages (uv: faster, when uv is installed).")
def setup(force: bool, installer: str) -> None:
    """Make rknn-toolkit2's converter venv (inside this venv; $TWINKLE_RKNN_VENV puts it elsewhere)."""
    from twinkle_edge.rknn.venv import setup as make

    click.echo(make(force=force, echo=lambda text: click.echo(text, err=True), installer=installer))


@edge.command("optimize")
@click.argument("model")
@click.option("--target", default="rk3588", show_default=True, help="See 'twinkle edge targets'.")
@click.option("--pruning-ratio", type=click.FloatRange(0, 1, max_open=True), default=0.3, show_default=True)
@click.option("--finetune-epochs", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--calibration-data", help="Data to fine-tune and calibrate on (default: the model's own).")
@click.option("--channel-multiple", type=click.IntRange(min=1), default=8, show_default=True,
              help="Pruned layers keep a multiple of this many channels (1: exactly the ratio).")
@click.option("--float", "float_only", is_flag=True, help="No INT8 (a float artefact).")
@click.option("--target-device", help="adb id of an attached Rockchip board: run the .rknn there too "
                                      "(eval_perf, eval_memory).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def optimize(model: str, target: str, pruning_ratio: float, finetune_epochs: int, calibration_data: str | None,
             channel_multiple: int, float_only: bool, target_device: str | None, as_json: bool) -> None:
    """Prune MODEL (twinkle://models/NAME, a run or a checkpoint), fine-tune it back, quantize and report."""
    from twinkle_edge.optimizer import EdgeOptimizer

    report = EdgeOptimizer(model=model, target=target, pruning_ratio=pruning_ratio,
                           quantize=None if float_only else "int8", calibration_data=calibration_data,
                           finetune_epochs=finetune_epochs, channel_multiple=channel_multiple,
                           target_device=target_device).optimize()
    click.echo(json.dumps(report.to_dict(), indent=2, default=str) if as_json else str(report))
