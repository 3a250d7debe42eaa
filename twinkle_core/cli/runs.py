"""``twinkle train``, ``plan``, ``export``, ``evaluate``, ``predict`` and ``runs``: the engine from the command line.

These commands import the engine (torch, Lightning) inside their bodies, so listing commands stay fast.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from twinkle_core.cli.options import hyperparams_from
from twinkle_core.cli.output import echo_json, echo_table
from twinkle_core.processes import DEFAULT_MAX_RESTARTS


def _training_options(func: Any) -> Any:
    for option in reversed(
        [
            click.argument("algorithm"),
            click.option("--data", "-d", required=True, help="Data path or URI (file, s3://, nas://, twinkle://)."),
            click.option("--task", "-t", help="The task (default: the algorithm's)."),
            click.option("--hp", "hp", multiple=True, metavar="KEY=VALUE", help="A hyperparameter; repeatable."),
            click.option("--epochs", type=int, help="Shorthand for --hp max_epochs=N."),
            click.option("--user", help="Run store user."),
            click.option("--project", help="Run store project."),
        ]
    ):
        func = option(func)
    return func


@click.command()
@_training_options
@click.option("--max-restarts", type=click.IntRange(min=0), default=DEFAULT_MAX_RESTARTS, show_default=True,
              help="Restart the training process from its last checkpoint when it dies (0: train in this process).")
@click.option("--nodes", type=click.IntRange(min=1), help="Machines taking part (start each with `twinkle launch`, "
                                                          "torchrun or SLURM); shorthand for --hp num_nodes=N.")
@click.option("--devices", type=click.IntRange(min=1), help="Devices (processes) per machine; --hp devices=M.")
@click.option("--from", "from_run", metavar="RUN", help="Start from a run (twinkle://user/project/runN) or a "
                                                        "checkpoint file; ALGORITHM must be its algorithm.")
@click.option("--mode", type=click.Choice(["continue", "finetune", "resume"]), default="continue", show_default=True,
              help="With --from: keep the optimizer state (continue), the weights only (finetune), or everything "
                   "on the same data (resume).")
@click.option("--report-to", "report_to", multiple=True, metavar="TRACKER",
              help="Report the run to an experiment tracker (mlflow, tensorboard, wandb: twinkle trackers list), "
                   "configured by its own environment variables; repeatable; --hp report_to=... too.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def train(algorithm: str, data: str, task: str | None, hp: tuple[str, ...], epochs: int | None,
          user: str | None, project: str | None, max_restarts: int, nodes: int | None, devices: int | None,
          from_run: str | None, mode: str, report_to: tuple[str, ...], as_json: bool) -> None:
    """Train ALGORITHM on --data as a new run (with --from, a child of that run); prints the plan, progress and the
    run URI.

    The training runs in a worker process that is restarted from the run's last checkpoint (exactly: the same
    data position and random state) if it is killed, up to --max-restarts times; each restart is recorded in
    the run's alerts.
    """
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    if max_restarts:  # this process only supervises: with one torch thread it may fork its training process
        import torch  # (can_fork_here) instead of starting an interpreter that imports everything again

        torch.set_num_threads(1)
    values = hyperparams_from(hp, epochs)
    values.update({k: v for k, v in (("num_nodes", nodes), ("devices", devices)) if v is not None})
    if report_to:
        values["report_to"] = [name for given in report_to for name in given.split(",") if name.strip()]
    given = {k: v for k, v in (("user", user), ("project", project)) if v is not None}
    if from_run:
        trainer = Trainer.from_checkpoint(from_run, data, mode, values, algorithm=algorithm, verbose=not as_json,
                                          **given)
    else:
        trainer = Trainer(algorithm, task, values, verbose=not as_json, **given)
    result = trainer.supervise(data, max_restarts=max_restarts) if max_restarts else trainer.fit(data=data)
    if as_json:
        echo_json({"run": result.run_uri, "status": result.status, "metrics": result.metrics,
                   "best_checkpoint": result.best_checkpoint, "data_fingerprint": result.data_fingerprint})
        return
    click.echo(f"Run {result.run_uri} {result.status}: best {result.monitor} = {result.best_metric}")
    click.echo(f"Artefacts in {result.run_dir}")


@click.command()
@_training_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(algorithm: str, data: str, task: str | None, hp: tuple[str, ...], epochs: int | None,
         user: str | None, project: str | None, as_json: bool) -> None:
    """Print the resource plan for training ALGORITHM on --data, without training."""
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    result = Trainer(algorithm, task, hyperparams_from(hp, epochs), user=user, project=project).plan(data)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(result.explain())


@click.command()
@click.argument("run")
@click.option("--format", "-f", "fmt", default="onnx", show_default=True, help="Exporter (twinkle exporters list).")
@click.option("--quantize", is_flag=True, help="8-bit: INT8 (static, calibrated on the run's data) for ONNX, q8_0 for "
                                             "GGUF.")
@click.option("--output", "-o", help="Where to write (default: the run's exports/ folder); the format's suffix is "
                                     "added when the name lacks it (-o out/yolo3 writes out/yolo3.onnx), and a "
                                     "folder gets model.onnx.")
@click.option("--opset", type=int, help="ONNX opset version.")
@click.option("--target", help="The device to convert for, where the exporter has several "
                               "(twinkle exporters list shows them; e.g. --format rknn --target rk3588).")
@click.option("--outtype", help="The weights' float type, where the exporter has several (--format gguf: f16, bf16, "
                                "f32).")
@click.option("--json", "as_json", is_flag=True, help="Print the verification as JSON.")
def export(run: str, fmt: str, quantize: bool, output: str | None, opset: int | None, target: str | None,
           outtype: str | None, as_json: bool) -> None:
    """Export RUN's best model (twinkle://user/project/runN or a .ckpt) and verify it."""
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    options: dict[str, object] = {"opset_version": opset} if opset is not None else {}
    if target is not None:
        options["target"] = target
    if outtype is not None:
        options["outtype"] = outtype
    result = Trainer.from_checkpoint(run, mode="finetune", verbose=False).export(fmt, output, quantize, **options)
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(f"Exported {result.format}{' (int8)' if result.quantized else ''} to {result.path}")
    click.echo(f"max |difference| vs PyTorch on {result.samples} validation samples: {result.max_abs_diff:.3g}"
               f" (cosine {result.cosine:.6f})")
    if result.metric:
        click.echo(f"{result.metric}: PyTorch {result.metric_torch:.4f}, export {result.metric_export:.4f}")


@click.command()
@click.argument("run")
@click.option("--data", "-d", required=True, help="The labelled test set (path or URI), in the run's data format.")
@click.option("--batch-size", type=click.IntRange(min=1), help="Samples per forward pass.")
@click.option("--output", "-o", help="A folder to write the evaluation to (default: the run's evaluations/N/).")
@click.option("--json", "as_json", is_flag=True, help="Print the evaluation as JSON.")
def evaluate(run: str, data: str, batch_size: int | None, output: str | None, as_json: bool) -> None:
    """Score RUN's best model (twinkle://user/project/runN or a .ckpt) on the test set --data, read with the run's
    data spec, and store the evaluation with the run (figures, per-class table, confusion matrix)."""
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)

    result = Trainer.from_checkpoint(run, mode="finetune", verbose=False).evaluate(data, batch_size=batch_size,
                                                                                   output=output)
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(f"Evaluated {result.checkpoint} on {result.samples} samples of {result.data_uri}")
    for name, value in result.metrics.items():
        click.echo(f"  {name:18} {value:.6g}")
    _echo_per_class(result.tables.get("per_class") or [])
    for name, count in (result.details.get("unseen_classes") or {}).items():
        click.echo(f"  not scored: {count} row(s) of class {name!r}, which the run never trained on")
    click.echo(f"Written to {result.folder}")


def _echo_per_class(rows: list[dict[str, Any]]) -> None:
    """The evaluation's per-class table as the task wrote it — a classifier's precision, recall, F1 and support, a
    detector's AP50, AP50-95, precision and recall, any task's own columns — floats to three decimals."""
    if not rows:
        return
    columns = list(dict.fromkeys(key for row in rows for key in row))
    columns = ["class", *(c for c in columns if c != "class")] if "class" in columns else columns
    shown = [{k: f"{v:.3f}" if isinstance(v, float) else v for k, v in row.items()} for row in rows]
    click.echo("Per class:")
    echo_table(shown, columns, "")


@click.command()
@click.argument("run")
@click.option("--data", "-d", required=True, help="The samples to predict (path or URI), in the run's data format.")
@click.option("--output", "-o", required=True,
              help="The file to write: .csv, .parquet, .jsonl or .json (detections: COCO's shape) (any URI).")
@click.option("--batch-size", type=click.IntRange(min=1), help="Samples per forward pass.")
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes to predict on (every sample written once, in input order).")
@click.option("--overwrite", is_flag=True, help="Replace --output if it exists.")
@click.option("--draw", is_flag=True, help="Detection: also write each image with its boxes drawn (OUTPUT's _files).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def predict(run: str, data: str, output: str, batch_size: int | None, devices: int, overwrite: bool, draw: bool,
            as_json: bool) -> None:
    """Predict every sample of --data with RUN's best model (twinkle://user/project/runN or a .ckpt) — or with an
    exported model.onnx alone, from the card it carries — and write one row per sample, in input order, to --output.

    An exported table model, image classifier or detector needs no plugin and no torch: onnxruntime, NumPy, Pillow
    (and pandas for tables) read, preprocess and decode as the card says. Other exports (K-lines, speech, text) read
    their data with the plugin that trained them."""
    if run.lower().endswith(".onnx"):
        from twinkle_core.inference import predict_export

        if draw:
            raise click.UsageError("--draw is not offered for an exported model: predict from the run to draw "
                                   "the boxes (twinkle predict RUN --data ... --draw)")
        exported = predict_export(run, data, output, batch_size=batch_size, overwrite=overwrite)
        if as_json:
            echo_json(exported.to_dict())
        else:
            click.echo(f"Predicted {exported.count} samples of {exported.data_uri} with {exported.model}")
            click.echo(f"Written to {exported.output} (columns: {', '.join(exported.columns)})")
        return
    from twinkle_core import Trainer  # imported with the collector paused (twinkle_core.imports)
    from twinkle_core.engine.ranks import is_global_zero

    result = Trainer.from_checkpoint(run, mode="finetune", verbose=False).predict(
        data, output, batch_size=batch_size, devices=devices, overwrite=overwrite, draw=draw)
    if not is_global_zero():
        return
    if as_json:
        echo_json(result.to_dict())
        return
    click.echo(f"Predicted {result.count} samples of {result.data_uri} with {result.checkpoint}")
    click.echo(f"Written to {result.output} (columns: {', '.join(result.columns)})")


@click.group()
def runs() -> None:
    """Runs in the store (TWINKLE_HOME)."""


@runs.command("list")
@click.option("--user", help="Only this user's runs.")
@click.option("--project", help="Only this project's runs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs_list(user: str | None, project: str | None, as_json: bool) -> None:
    """List runs, newest first."""
    from twinkle_core.store.runs import RunStore

    records = RunStore().list(user, project)
    if as_json:
        echo_json([r.to_dict() for r in records])
        return
    rows = []
    for r in records:
        metric = next((f"{k}={v:.4g}" for k, v in r.metrics.items() if k.startswith("best_") and v is not None), "")
        created = dt.datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M")
        rows.append({"run": r.uri, "algorithm": r.algorithm, "status": r.status, "best": metric,
                     "created": created, "parent": r.parent or ""})
    echo_table(rows, ["run", "algorithm", "status", "best", "created", "parent"], "No runs yet.")


def utilisation_line(measured: dict[str, Any]) -> str:
    """``utilisation: 812 samples/s, 1.9 GFLOP/s (MFU 4.1 % of ...), data wait 2.0 %`` ("" before it was measured)."""
    if not measured.get("samples_per_second"):
        return ""
    mfu = measured.get("mfu")
    share = f"MFU {100 * mfu:.1f} % of {measured.get('peak_source')}" if mfu is not None else \
        str(measured.get("peak_source", "no peak known"))
    tokens = f", {measured['tokens_per_second']:.0f} tokens/s" if measured.get("tokens_per_second") else ""
    return (f"utilisation: {measured['samples_per_second']:.1f} samples/s per device{tokens}, "
            f"{measured['achieved_flops_per_second'] / 1e9:.2f} GFLOP/s achieved ({share}), "
            f"data wait {100 * measured.get('data_wait_fraction', 0):.1f} % of step time")


@runs.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs_show(run: str, as_json: bool) -> None:
    """Show one run's record: plan, metrics, checkpoints and exports."""
    from twinkle_core.store.runs import RunStore

    store = RunStore()
    record = store.get(run)
    data = record.to_dict()
    weights = _weights_report(store.path(record.id, "weights.json"))
    if weights is not None:
        data["weights"] = weights
    if as_json:
        echo_json(data)
        return
    for key in ("uri", "algorithm", "task", "status", "data_uri", "data_fingerprint", "hardware", "parent",
                "mode", "best_checkpoint", "error"):
        if data.get(key) is not None:
            click.echo(f"{key:17} {data[key]}")
    click.echo(f"{'folder':17} {store.run_dir(record.id)}")
    for key in ("hyperparams", "metrics", "measured"):
        click.echo(f"{key}:")
        for name, value in sorted((data.get(key) or {}).items()):
            click.echo(f"  {name:24} {value}")
    line = utilisation_line(data.get("measured") or {})
    if line:
        click.echo(line)
    if record.plan:
        from twinkle_core.planning.plan import Plan

        click.echo(Plan.from_dict(record.plan).explain())
    if weights is not None:  # what weights= loaded, name by name (weights.json)
        click.echo(f"weights: {weights.get('summary', weights.get('source'))}")
        for note in weights.get("notes", []):
            click.echo(f"  {note}")
    for item in record.exports:
        click.echo(f"export {item['format']}{' int8' if item['quantized'] else ''}: {item['path']} "
                   f"(max diff {item['max_abs_diff']:.3g}, {item.get('metric')} {item.get('metric_export')})")
    for item in store.evaluations(record.id):
        figures = ", ".join(f"{k} {v:.4g}" for k, v in list(item.get("metrics", {}).items())[:4])
        click.echo(f"evaluation {item.get('number')}: {item.get('samples')} samples of {item.get('data_uri')} "
                   f"({figures}) in {item.get('folder')}")


def _weights_report(path: str) -> dict[str, Any] | None:
    """The run's ``weights.json`` (what ``weights=`` loaded), if it has one."""
    import json

    from twinkle_core.uris import filesystem

    fs, local = filesystem(path)
    if not fs.exists(local):
        return None
    return json.loads(fs.cat_file(local))


@runs.command("repair")
def runs_repair() -> None:
    """Rebuild the run catalogue from the run folders (after it was damaged); the old file is kept aside."""
    import os

    from twinkle_core.store.repair import rebuild_catalogue
    from twinkle_core.uris import filesystem, twinkle_home

    home = twinkle_home()
    fs, local = filesystem(home)
    path = os.environ.get("TWINKLE_CATALOGUE") or os.path.join(local, "catalogue.sqlite")
    count, moved = rebuild_catalogue(local, path)
    click.echo(f"Rebuilt {path} from {count} run folder(s)" + (f"; the old file is at {moved}" if moved else ""))


COMMANDS = (train, plan, export, evaluate, predict, runs)
"""The engine's commands, added to the ``twinkle`` group."""
