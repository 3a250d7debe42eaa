"""One training run on Lightning: callbacks, checkpoints, logging, and the run's record kept current."""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import PreparedData
from twinkle_core.engine.checkpoints import TWINKLE_KEY, AtomicCheckpointIO
from twinkle_core.engine.continuation import Continuation, RestoreOptimizerState
from twinkle_core.engine.curves import plot_curves
from twinkle_core.engine.loaders import eval_loader, train_loader
from twinkle_core.engine.resume import ExactResume
from twinkle_core.engine.settings import TrainerSettings
from twinkle_core.planning import Plan
from twinkle_core.store.catalogue import RunRecord
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import filesystem


@dataclass
class RunSetup:
    """Everything :func:`run_lightning` needs for one run."""

    store: RunStore
    record: RunRecord
    algorithm: Algorithm
    prepared: PreparedData
    plan: Plan
    settings: TrainerSettings
    checkpoint_record: dict[str, Any]
    continuation: Continuation | None = None
    verbose: bool = True
    callbacks: list[L.Callback] = field(default_factory=list)


class TwinkleRecord(L.Callback):
    """Write Twinkle's record (algorithm, hyperparameters, data spec, run) into every checkpoint."""

    def __init__(self, record: dict[str, Any]) -> None:
        """Keep the record to write."""
        self.record = record

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Add the record under the ``twinkle`` key."""
        checkpoint[TWINKLE_KEY] = self.record


class _Timer(L.Callback):
    """Measures training time (without validation) for the plan's history."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.samples = 0
        self._start = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Any, batch: Any, idx: int) -> None:
        self.seconds += time.perf_counter() - self._start
        first = batch[0] if isinstance(batch, (tuple, list)) else batch
        self.samples += len(first) if hasattr(first, "__len__") else 1


class _DropAdverts(logging.Filter):
    """Drops Lightning's promotional tips from its log; real messages pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip" not in record.getMessage()


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropAdverts())


def run_lightning(setup: RunSetup) -> Any:
    """Train as planned, keep the catalogue current, write curves; return a :class:`FitResult`."""
    from twinkle_core.trainer import FitResult

    store, record, plan, settings = setup.store, setup.record, setup.plan, setup.settings
    algorithm, prepared = setup.algorithm, setup.prepared
    run_dir = store.run_dir(record.id)
    ckpt_dir = store.path(record.id, "checkpoints")
    metric, mode = algorithm.monitor
    best = ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor=metric, mode=mode, save_top_k=1,
                           save_last=False, enable_version_counter=False, auto_insert_metric_name=False)
    last = ModelCheckpoint(dirpath=ckpt_dir, save_top_k=0, save_last=True, enable_version_counter=False)
    timer = _Timer()
    callbacks: list[L.Callback] = [best, last, ExactResume(), TwinkleRecord(setup.checkpoint_record), timer]
    if settings.checkpoint_every_n_steps:  # also mid-epoch, into the same last.ckpt
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, save_top_k=0, save_last=True, enable_version_counter=False,
                                         every_n_train_steps=settings.checkpoint_every_n_steps))
    if settings.early_stopping_patience:
        callbacks.append(EarlyStopping(monitor=metric, mode=mode, patience=settings.early_stopping_patience))
    continuation = setup.continuation
    if continuation is not None and continuation.optimizer_states:
        callbacks.append(RestoreOptimizerState(continuation.optimizer_states))
    callbacks += setup.callbacks
    torch.set_num_threads(plan.torch_threads)
    trainer = L.Trainer(
        **plan.lightning_kwargs(),
        max_epochs=settings.max_epochs,
        max_steps=settings.max_steps,
        logger=CSVLogger(save_dir=run_dir, name="logs", version=""),
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=settings.progress_bar and setup.verbose,
        enable_model_summary=setup.verbose,
        gradient_clip_val=settings.gradient_clip_val,
        val_check_interval=settings.val_check_interval,
        log_every_n_steps=max(1, min(50, plan.estimates.get("optimizer_steps_per_epoch", 50))),
        default_root_dir=run_dir,
    )
    loaders = (
        train_loader(prepared.train, plan.micro_batch_size, settings.seed, plan.num_workers),
        eval_loader(prepared.val, max(plan.micro_batch_size, 256), plan.num_workers),
    )
    ckpt_path = continuation.checkpoint_uri if continuation and continuation.mode == "resume" else None
    if continuation is not None and continuation.mode == "resume" and continuation.parent_run:
        parent = store.catalogue.get(continuation.parent_run.removeprefix("twinkle://"))
        if parent is not None and parent.status == "running":
            store.update(parent.id, status="interrupted")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")  # Lightning's, harmless
            trainer.fit(algorithm, *loaders, ckpt_path=ckpt_path)
    except BaseException as err:
        store.update(record.id, status="failed", error=f"{type(err).__name__}: {err}", finished=time.time())
        raise
    if trainer.interrupted:
        store.update(record.id, status="failed", error="interrupted", finished=time.time())
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    best_path = _uri(best.best_model_path, ckpt_dir)
    last_path = _uri(last.last_model_path, ckpt_dir)
    plot_curves(store.path(record.id, "logs", "metrics.csv"), store.path(record.id, "curves.png"),
                f"{record.uri} · {record.algorithm}")
    measured = {
        "micro_batch_size": plan.micro_batch_size,
        "seconds_per_sample": timer.seconds / timer.samples if timer.samples else None,
        "train_seconds": round(timer.seconds, 3),
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
    }
    status = "finished" if not trainer.interrupted else "failed"
    best_score = float(best.best_model_score) if best.best_model_score is not None else None
    final = store.update(
        record.id, status=status, metrics={**metrics, f"best_{metric}": best_score}, measured=measured,
        best_checkpoint=best_path or last_path, finished=time.time(),
    )
    return FitResult(
        run_uri=record.uri, status=final.status, metrics=metrics, best_metric=best_score, monitor=metric,
        best_checkpoint=best_path, last_checkpoint=last_path, plan=plan, data_fingerprint=prepared.fingerprint,
        run_dir=run_dir, parent=f"twinkle://{record.parent}" if record.parent else None, alerts=final.alerts,
    )


def _uri(path: str, folder: str) -> str | None:
    if not path:
        return None
    fs, _ = filesystem(folder)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol == "file" or "://" in path else f"{protocol}://{path}"
