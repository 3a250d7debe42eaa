"""Pipeline-parallel training (``strategy="pipeline"``): one stage of the network per process, through
``torch.distributed.pipelining`` (GPipe schedule).

Lightning has no pipeline strategy, so this runner drives the loop itself. The job's processes come from a
launcher (``twinkle launch --devices N``: N stages). Every process builds the algorithm's network and keeps
its stage (``Algorithm.pipeline_stages``); each batch is split into micro-batches that flow through the
stages forward and back; each stage steps its own optimizer. After every epoch the stages' weights are
gathered on rank 0, which validates the whole network with the algorithm's own loss and metrics, logs them to
the run's ``metrics.csv`` and writes ``last.ckpt`` / ``best.ckpt`` (full weights and Twinkle's record, so
export, continue and finetune work as for any run).

What it leaves out: data parallel replicas of the pipeline, mid-epoch checkpoints and exact resume (a
restarted pipeline job starts again), and Lightning callbacks (monitor rules, budgets).
"""

from __future__ import annotations

import csv
import io
import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from twinkle_core.engine.checkpoints import TWINKLE_KEY
from twinkle_core.engine.curves import plot_curves
from twinkle_core.engine.ranks import broadcast, close_group
from twinkle_core.engine.result import FitResult
from twinkle_core.errors import TwinkleError
from twinkle_core.pipelining import micro_batches
from twinkle_core.store.atomic import atomic_write_bytes
from twinkle_core.uris import join


def run_pipeline(setup: Any) -> FitResult:
    """Train ``setup`` (a ``RunSetup``) as a pipeline over the job's processes."""
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    if not dist.is_initialized():
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) < 2:
            raise TwinkleError("strategy='pipeline' runs one stage per process, and this job has one process: start "
                               "it with `twinkle launch ALGORITHM --devices N --hp strategy=pipeline --run`")
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if setup.continuation is not None and setup.continuation.mode == "resume":
        raise TwinkleError("a pipeline run cannot resume exactly (its checkpoints hold no loader or RNG state); "
                           "use Trainer.from_checkpoint(run, mode='continue')")
    rank, stages = dist.get_rank(), dist.get_world_size()
    if stages < 2:
        raise TwinkleError("strategy='pipeline' needs one process per stage: start it with `twinkle launch --devices N`")
    algorithm, prepared, plan, settings = setup.algorithm, setup.prepared, setup.plan, setup.settings
    device = torch.device("cuda", rank % torch.cuda.device_count()) if torch.cuda.is_available() else torch.device("cpu")
    torch.set_num_threads(plan.torch_threads)
    parts = algorithm.pipeline_stages(stages)
    module = parts[rank].to(device)
    batch_size = plan.micro_batch_size
    chunks = micro_batches(batch_size, stages)
    stage = PipelineStage(module, rank, stages, device)
    schedule = ScheduleGPipe(stage, n_microbatches=chunks, loss_fn=algorithm.compute_loss)
    optimizer = algorithm.build_optimizer(list(module.parameters()))
    first, last = rank == 0, rank == stages - 1
    metric, mode = algorithm.monitor
    rows: list[dict[str, Any]] = []
    best: float | None = None
    step, start = 0, time.perf_counter()
    for epoch in range(max(settings.max_epochs, 1)):
        module.train()
        generator = torch.Generator().manual_seed(settings.seed + epoch)  # the same batches on every stage
        loader = DataLoader(prepared.train, batch_size=batch_size, shuffle=True, drop_last=True, generator=generator,
                            collate_fn=prepared.collate_fn)
        epoch_losses: list[float] = []
        for batch in loader:
            x, y = batch[0].to(device), batch[1].to(device)
            optimizer.zero_grad(set_to_none=True)
            losses: list[torch.Tensor] = []
            if first:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            optimizer.step()
            step += 1
            if last:
                epoch_losses.append(float(torch.stack(losses).mean()))
            if settings.max_steps > 0 and step >= settings.max_steps:
                break
        train_loss = broadcast(sum(epoch_losses) / max(len(epoch_losses), 1), src=stages - 1)
        states = [None] * stages
        dist.all_gather_object(states, {k: v.cpu() for k, v in module.state_dict().items()})
        if first and setup.record is not None:
            figures = _validate(algorithm, parts, states, prepared, batch_size)
            rows.append({"epoch": epoch, "step": step, "train_loss": train_loss, **figures})
            value = figures.get(metric)
            improved = value is not None and (best is None or (value > best if mode == "max" else value < best))
            best = value if improved else best
            _save(setup, algorithm, epoch, step, improved)
            _write_rows(setup, rows)
        if settings.max_steps > 0 and step >= settings.max_steps:
            break
    seconds = time.perf_counter() - start
    result = _finish(setup, rows, best, metric, seconds, step * batch_size) if first and setup.record else None
    shared = broadcast(result.to_dict() if result is not None else None)
    close_group()
    return FitResult.from_dict(shared)


def _validate(algorithm: Any, parts: list[torch.nn.Module], states: list[Any], prepared: Any,
              batch_size: int) -> dict[str, float]:
    """Load every stage's weights into the whole network and score the validation set on rank 0."""
    for part, state in zip(parts, states):
        part.load_state_dict(state)
    network = algorithm.model.eval()
    totals: dict[str, float] = {}
    count = 0
    with torch.no_grad():
        for x, y, *_ in DataLoader(prepared.val, batch_size=max(batch_size, 256), collate_fn=prepared.collate_fn):
            outputs = network(x)
            values = {"loss": algorithm.compute_loss(outputs, y), **algorithm.compute_metrics(outputs, y)}
            for name, value in values.items():
                totals[name] = totals.get(name, 0.0) + float(value) * len(y)
            count += len(y)
    return {f"val_{k}": v / max(count, 1) for k, v in totals.items()}


def _save(setup: Any, algorithm: Any, epoch: int, step: int, best: bool) -> None:
    """``last.ckpt`` (and ``best.ckpt`` when the monitored metric improved), full weights, atomically."""
    checkpoint = {"state_dict": algorithm.state_dict(), "epoch": epoch, "global_step": step,
                  TWINKLE_KEY: setup.checkpoint_record.to_dict()}
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    folder = setup.store.path(setup.record.id, "checkpoints")
    for name in ("last.ckpt", "best.ckpt") if best else ("last.ckpt",):
        atomic_write_bytes(join(folder, name), buffer.getvalue())


def _write_rows(setup: Any, rows: list[dict[str, Any]]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(setup.store.path(setup.record.id, "logs", "metrics.csv"), text.getvalue().encode())


def _finish(setup: Any, rows: list[dict[str, Any]], best: float | None, metric: str, seconds: float,
            samples: int) -> FitResult:
    store, record, plan = setup.store, setup.record, setup.plan
    metrics = {k: float(v) for k, v in (rows[-1] if rows else {}).items() if k not in ("epoch", "step")
               and isinstance(v, (int, float)) and math.isfinite(v)}
    plot_curves(store.path(record.id, "logs", "metrics.csv"), store.path(record.id, "curves.png"),
                f"{record.uri} · {record.algorithm}")
    folder = store.path(record.id, "checkpoints")
    measured = {"micro_batch_size": plan.micro_batch_size, "train_seconds": round(seconds, 3),
                "seconds_per_sample": seconds / samples if samples else None, "pipeline_stages": plan.devices * plan.num_nodes}
    final = store.update(record.id, status="finished", metrics={**metrics, f"best_{metric}": best}, measured=measured,
                         best_checkpoint=join(folder, "best.ckpt"), finished=time.time(), plan=plan.to_dict())
    return FitResult(run_uri=record.uri, status=final.status, metrics=metrics, best_metric=best, monitor=metric,
                     best_checkpoint=join(folder, "best.ckpt"), last_checkpoint=join(folder, "last.ckpt"), plan=plan,
                     data_fingerprint=setup.prepared.fingerprint, run_dir=store.run_dir(record.id), parent=None,
                     alerts=final.alerts, stop_reason=None)
