"""One training run on Lightning: callbacks, checkpoints, logging, and the run's record kept current.

Every process of a job runs this; only global rank 0 has the run's record (``RunSetup.record``) and writes
to the store. The other ranks train into a scratch folder that nothing writes to (Lightning's checkpoint
callbacks take rank 0's folder, and only rank 0 saves), and receive rank 0's ``FitResult`` at the end.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import IterableDataset

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import PreparedData
from twinkle_core.engine.allocator import set_allocator
from twinkle_core.engine.checkpoints import TWINKLE_KEY, AtomicCheckpointIO, LastCheckpoint
from twinkle_core.engine.compression import measured_bytes
from twinkle_core.engine.continuation import Continuation, RestoreOptimizerState
from twinkle_core.engine.curves import last_logged, merge_history, plot_curves
from twinkle_core.engine.loaders import eval_loader, train_loader
from twinkle_core.engine.pipelined import PipelineGradients
from twinkle_core.engine.precision import (PrecisionSwitch, SwitchingMixedPrecision, precision_plugin,
                                           probed_bf16_ratio)
from twinkle_core.engine.ranks import broadcast, close_group, init_elastic_group
from twinkle_core.engine.record import CheckpointRecord
from twinkle_core.engine.reporting import ReportingLogger, open_run_reporter, send_run_files
from twinkle_core.engine.isolation import distributed_environment_kept, quiet_lightning
from twinkle_core.engine.result import FitResult
from twinkle_core.engine.resume import ExactResume
from twinkle_core.engine.settings import TrainerSettings
from twinkle_core.engine.stopping import StopOnSigterm, StoppedBySignal
from twinkle_core.engine.strategies import lightning_strategy
from twinkle_core.engine.utilisation import Utilisation, tokens_per_sample
from twinkle_core.errors import TwinkleError
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.tracking import Reporter
from twinkle_core.ops.alerts import Alert, AlertAction, AlertKind
from twinkle_core.ops.budget import BudgetConfig, BudgetGuard, forecast
from twinkle_core.ops.memory import MemoryGuard, apply_gpu_limit, facts_of
from twinkle_core.ops.monitor import Monitor, MonitorConfig
from twinkle_core.ops.notify import run_notifier
from twinkle_core.parallel import model_parallel
from twinkle_core.planning import DEFAULT_EPOCHS, Decision, Plan
from twinkle_core.store.catalogue import RunRecord, RunStatus
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import filesystem, is_local, join, run_uri


@dataclass
class RunSetup:
    """Everything ``run_lightning`` needs for one run (``record`` is ``None`` on ranks other than 0)."""

    store: RunStore
    record: RunRecord | None
    algorithm: Algorithm
    prepared: PreparedData
    plan: Plan
    settings: TrainerSettings
    checkpoint_record: CheckpointRecord
    continuation: Continuation | None = None
    verbose: bool = True
    callbacks: list[L.Callback] = field(default_factory=list)
    monitor: MonitorConfig | None = None
    budget: BudgetConfig | None = None
    started: float | None = None
    """``time.perf_counter()`` when the fit began (before its data was read), for the run's ``run_seconds``."""


class RecordWriter(L.Callback):
    """Write Twinkle's record of the checkpoint (``CheckpointRecord``: algorithm, hyperparameters, data spec, run)
    into every checkpoint."""

    def __init__(self, record: CheckpointRecord) -> None:
        """Keep the record to write."""
        self.record = record.to_dict()

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """Add the record under the ``twinkle`` key."""
        checkpoint[TWINKLE_KEY] = self.record


class _DropAdverts(logging.Filter):
    """Drops Lightning's promotional tips from its log; real messages pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip" not in record.getMessage()


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropAdverts())


@dataclass
class RunCallbacks:
    """A run's Lightning callbacks, by role (built once, kept across out-of-memory retries).

    Attributes:
        best: the best checkpoint (``best.ckpt``, by the algorithm's monitored metric).
        last: the newest state (``last.ckpt``) after every validation, or every few epochs as the plan says.
        resume: the exact data position and RNG state in every checkpoint.
        record_writer: Twinkle's record (algorithm, hyperparameters, data spec, run) in every checkpoint.
        utilisation: step times, throughput and MFU, for the plan's history and the run's figures.
        sigterm: SIGTERM saves a checkpoint after the current batch, then stops the run.
        last_path: where ``last.ckpt`` is written (also by a stop the monitor or the budget asks for).
        monitor: the alert rules, when ``Trainer.monitor`` asked for them.
        budget: the budget guard, when a budget was set.
        precision: the switch between bf16-mixed and fp32, when the plan says so (``Plan.precision_switching``;
            ``twinkle_core.engine.precision``); its plugin is the run's precision.
        extra: the others, in order (mid-epoch checkpoints, early stopping, optimizer state to restore, the
            memory guard, a progress bar, the caller's own).
        reporter: the run's experiment trackers (``report_to``; rank 0 only), fed by a ``ReportingLogger``.
    """

    best: ModelCheckpoint
    last: ModelCheckpoint
    resume: ExactResume
    record_writer: RecordWriter
    utilisation: Utilisation
    sigterm: StopOnSigterm
    last_path: str
    monitor: Monitor | None = None
    budget: BudgetGuard | None = None
    precision: PrecisionSwitch | None = None
    extra: list[L.Callback] = field(default_factory=list)
    reporter: Reporter | None = None

    @property
    def all(self) -> list[L.Callback]:
        """Every callback in the order Lightning runs them (the SIGTERM stop last)."""
        switch = [self.precision] if self.precision is not None else []
        return [self.best, self.last, self.resume, self.record_writer, self.utilisation, *switch, *self.extra,
                self.sigterm]

    @property
    def stopped_by(self) -> Alert | None:
        """The alert that stopped training early (a rule's or the budget's), if one did."""
        return next((guard.stopped_by for guard in (self.monitor, self.budget) if guard and guard.stopped_by), None)


def _callbacks(setup: RunSetup, ckpt_dir: str, notify: Callable[[Alert], None],
               reporter: Reporter | None = None) -> RunCallbacks:
    """Every callback of a run, by role (and its trackers' reporter)."""
    settings, algorithm = setup.settings, setup.algorithm
    metric, mode = algorithm.monitor
    last_path = join(ckpt_dir, "last.ckpt")
    roles = RunCallbacks(
        best=ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor=metric, mode=mode, save_top_k=1,
                             save_last=False, enable_version_counter=False, auto_insert_metric_name=False),
        # no monitor + top-1: the newest state, as last.ckpt, after validation (Lightning's save_last alone writes
        # last.ckpt only when another checkpoint was saved in the same step), every epoch or as the plan says
        last=LastCheckpoint(ckpt_dir, setup.plan.checkpoint_every_n_epochs),
        resume=ExactResume(),
        record_writer=RecordWriter(setup.checkpoint_record),
        utilisation=Utilisation(),
        sigterm=StopOnSigterm(last_path),
        last_path=last_path,
        reporter=reporter,
    )
    extra = roles.extra
    plan = setup.plan
    if plan.precision_switching == "on" and str(plan.strategy) in ("auto", "ddp") and not plan.layout.pipeline_enabled:
        roles.precision = PrecisionSwitch(SwitchingMixedPrecision(
            "cuda" if plan.accelerator in ("cuda", "gpu") else "cpu", enabled=plan.precision == "bf16-mixed"),
            bf16_ratio=probed_bf16_ratio(plan))
    if plan.accelerator == "cpu":  # the MFU's peak, checked during the run
        roles.utilisation.peak_precision = peak_precision(plan, roles)
        roles.utilisation.planned_seconds = _estimated_train_seconds(plan, False) or 0.0
    if settings.checkpoint_every_n_steps:  # also mid-epoch, into the same last.ckpt
        extra.append(ModelCheckpoint(dirpath=ckpt_dir, save_top_k=0, save_last=True, enable_version_counter=False,
                                     every_n_train_steps=settings.checkpoint_every_n_steps))
    if settings.early_stopping_patience:
        extra.append(EarlyStopping(monitor=metric, mode=mode, patience=settings.early_stopping_patience))
    if setup.continuation is not None and setup.continuation.optimizer_states:
        extra.append(RestoreOptimizerState(setup.continuation.optimizer_states))
    if setup.plan.layout.pipeline_enabled:  # tied copies summed, clipping over every stage
        extra.append(PipelineGradients(settings.gradient_clip_val))
    if setup.monitor is not None:
        roles.monitor = Monitor(setup.monitor, notify, last_path)
        extra.append(roles.monitor)
    if setup.budget is not None:
        roles.budget = BudgetGuard(setup.budget, setup.plan, notify, last_path)
        extra.append(roles.budget)
    if settings.memory_limit_bytes and setup.plan.accelerator == "cpu":
        extra.append(MemoryGuard(facts_of(setup.plan), settings.memory_limit_bytes))
    if settings.progress_bar and setup.verbose and not sys.stdout.isatty():
        # a log file, not a terminal: one progress line per epoch instead of one per step
        extra.append(TQDMProgressBar(refresh_rate=max(1, int(setup.plan.estimates.get("optimizer_steps_per_epoch", 1))
                                                      * setup.plan.accumulate_grad_batches)))
    extra.extend(setup.callbacks)
    return roles


def peak_precision(plan: Plan, roles: RunCallbacks) -> str:
    """The precision whose peak a run's MFU divides by: the plan's, or bf16-mixed for a run that may switch to it
    (the higher peak of the two it may compute in; ``twinkle_core.engine.utilisation``)."""
    return "bf16-mixed" if roles.precision is not None else plan.precision


def _lightning_trainer(setup: RunSetup, roles: RunCallbacks, run_dir: str) -> L.Trainer:
    plan, settings = setup.plan, setup.settings
    if not setup.algorithm.automatic_optimization:  # it steps its own optimizers (a GAN): Lightning cannot
        name = type(setup.algorithm).__name__          # accumulate or clip for it
        if plan.accumulate_grad_batches != 1:
            raise TwinkleError(f"{name} steps its optimizers itself, so it cannot accumulate "
                               f"{plan.accumulate_grad_batches} micro-batches of {plan.micro_batch_size}; set "
                               f"batch_size={plan.micro_batch_size} (no effective_batch_size) or a smaller model")
        if settings.gradient_clip_val is not None:
            raise TwinkleError(f"{name} steps its optimizers itself; gradient_clip_val={settings.gradient_clip_val} "
                               "cannot apply: leave it unset")
    log_every = max(1, min(50, plan.estimates.get("optimizer_steps_per_epoch", 50)))
    sharded = is_local(filesystem(run_dir)[0])  # DCP writes folders on this machine's disk; elsewhere: whole files
    strategy, plugins = lightning_strategy(plan, sharded)
    plugins = [AtomicCheckpointIO(), *plugins]
    kwargs: dict[str, Any] = {"accelerator": plan.accelerator, "devices": plan.devices, "num_nodes": plan.num_nodes,
                              "precision": plan.precision, "strategy": strategy,
                              "accumulate_grad_batches": plan.accumulate_grad_batches}
    if roles.precision is not None:  # bf16 autocast the switch turns off and on
        mixed = roles.precision.plugin
    else:
        mixed = precision_plugin(str(plan.precision), plan.accelerator, str(plan.strategy)) \
            if not plan.layout.pipeline_enabled else None
    if mixed is not None:  # clips the gradients of torch's fused optimizers, which Lightning's own refuses
        plugins.append(mixed)
        kwargs.pop("precision")
    clip = None if plan.layout.pipeline_enabled else settings.gradient_clip_val  # stages clip together
    return L.Trainer(
        **kwargs,
        max_epochs=_max_epochs(plan, settings),
        min_epochs=setup.algorithm.min_epochs,
        max_steps=settings.max_steps,
        # rows reach metrics.csv as they are logged, so a dashboard's curves grow live
        logger=[CSVLogger(save_dir=run_dir, name="logs", version="", flush_logs_every_n_steps=log_every),
                *([ReportingLogger(roles.reporter)] if roles.reporter is not None else [])],
        callbacks=roles.all,
        plugins=plugins,
        enable_progress_bar=settings.progress_bar and setup.verbose,
        enable_model_summary=setup.verbose,
        gradient_clip_val=clip,
        val_check_interval=(plan.val_check_interval if plan.val_check_interval is not None
                            else settings.val_check_interval),
        log_every_n_steps=log_every,
        default_root_dir=run_dir,
        use_distributed_sampler=False,  # the engine's samplers split the data between ranks themselves
    )


def _max_epochs(plan: Plan, settings: TrainerSettings) -> int:
    """The plan's epochs; for a plan that did not decide them (a strategy without ``TrainingLengthDecider``, a plan
    an earlier release stored) the user's, else no limit when ``max_steps`` ends the run, else ``DEFAULT_EPOCHS``."""
    if plan.max_epochs is not None:
        return plan.max_epochs
    if settings.max_epochs is not None:
        return settings.max_epochs
    return -1 if settings.max_steps > 0 else DEFAULT_EPOCHS


def _no_notify(alert: Alert) -> None:
    """Ranks other than 0 notify nobody (rank 0 does, once per job)."""


def run_lightning(setup: RunSetup) -> FitResult:
    """Train as planned, keep the catalogue current, write curves; return a ``FitResult``.

    With ``auto_batch_scaling``, an out-of-memory error halves the micro-batch, doubles the gradient
    accumulation (the effective batch stays) and continues from the last checkpoint — or from the start
    when there is none yet. Every rank returns the same result (rank 0's, broadcast). The ranks of one
    tensor-parallel group read the same batches (``twinkle_core.parallel.model_parallel``).
    """
    with model_parallel(setup.plan.layout.model_parallel), \
            distributed_environment_kept():
        return _run_lightning(setup)


def _run_lightning(setup: RunSetup) -> FitResult:
    if setup.plan.strategy in ("ddp", "fsdp2", "pipeline"):  # a torchrun restart joins on a store prefix of its own
        init_elastic_group("nccl" if setup.plan.accelerator == "cuda" else "gloo")
    if setup.record is None:  # a rank other than 0
        scratch = tempfile.mkdtemp(prefix="twinkle-rank-")
        try:
            with quiet_lightning(False):
                _train(setup, scratch, os.path.join(scratch, "checkpoints"), _no_notify)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        shared = broadcast(None)  # rank 0's result, or its error after training
        close_group()
        if isinstance(shared, dict):
            return FitResult.from_dict(shared)
        raise TwinkleError(f"the job's rank 0 failed after training: {shared}")
    store, record = setup.store, setup.record
    notify = run_notifier(store, record.id, record.uri, setup.monitor.webhook if setup.monitor else None)
    reporter = _open_reporter(setup)
    try:
        with quiet_lightning(setup.verbose):
            trainer, roles = _train(setup, store.run_dir(record.id), store.path(record.id, "checkpoints"), notify,
                                    reporter)
    except StoppedBySignal as err:  # asked to stop: resumable from the checkpoint it just saved
        store.end_run(record.id, RunStatus.STOPPED, str(err))
        _close_reporter(setup, reporter, "stopped")
        raise
    except BaseException as err:
        store.end_run(record.id, RunStatus.FAILED, err)
        _close_reporter(setup, reporter, "failed")
        raise
    try:
        result = _finish(setup, trainer, roles)
    except BaseException as err:  # every other rank waits for the result: tell them
        store.end_run(record.id, RunStatus.FAILED, err)
        _close_reporter(setup, reporter, "failed")
        broadcast(f"{type(err).__name__}: {err}")
        close_group()
        raise
    broadcast(result.to_dict())
    close_group()
    return result


def _train(setup: RunSetup, run_dir: str, ckpt_dir: str, notify: Callable[[Alert], None],
           reporter: Reporter | None = None) -> tuple[L.Trainer, RunCallbacks]:
    """Run Lightning's fit (with out-of-memory retries); the store is written only where ``setup.record`` is."""
    store, record, plan, settings = setup.store, setup.record, setup.plan, setup.settings
    algorithm, prepared, continuation = setup.algorithm, setup.prepared, setup.continuation
    roles = _callbacks(setup, ckpt_dir, notify, reporter)
    if setup.budget is not None and record is not None:
        expected = forecast(setup.budget, plan)
        if expected["fraction"] > 1:
            notify(Alert(AlertKind.BUDGET, AlertAction.LOG, f"the plan's estimate ({expected['estimated_seconds']:.0f} "
                         f"s) would use {expected['fraction']:.0%} of {expected['limit']}", rule="forecast",
                         details=expected))
    apply_gpu_limit(settings.memory_limit_bytes)
    torch.set_num_threads(plan.torch_threads)
    if plan.allocator == "retain" and not set_allocator("retain"):  # not measured slower (AllocatorDecider), or pinned
        warnings.warn("allocator='retain' sets glibc's malloc thresholds, and this process's allocator is not "
                      "glibc's: left as it is", stacklevel=2)
    if plan.memory_format == "channels_last":  # the plan measured it faster (MemoryFormatDecider)
        algorithm.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if plan.compile not in ("off", "", None):  # compiled in place: the state dict's names stay
        algorithm.compile(mode=plan.compile)
    if record is not None and algorithm.weights_report is not None:  # what weights= loaded, name by name
        atomic_write_text(store.path(record.id, "weights.json"),
                          json.dumps(algorithm.weights_report.to_dict(), indent=2) + "\n")
    ckpt_path = continuation.checkpoint_uri if continuation and continuation.mode == "resume" else None
    if record is not None and continuation is not None and continuation.mode == "resume" and continuation.parent_run:
        parent = store.catalogue.get(store.run_id(continuation.parent_run))
        if parent is not None and parent.status == "running" and parent.id != record.id:
            store.update(parent.id, status=RunStatus.INTERRUPTED)
    while True:
        trainer = _lightning_trainer(setup, roles, run_dir)
        loaders = (
            train_loader(prepared.train, plan.micro_batch_size, settings.seed, plan.num_workers, prepared.collate_fn,
                         algorithm.updates_per_batch, plan.accumulate_grad_batches),
            eval_loader(prepared.val, setup.algorithm.eval_batch_size(plan.micro_batch_size),
                        0 if isinstance(prepared.val, IterableDataset) else plan.num_workers, prepared.collate_fn),
        )
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")  # Lightning's, harmless
                warnings.filterwarnings("ignore", message=".*dirpath has changed from.*")  # a resumed run's new folder
                trainer.fit(algorithm, *loaders, ckpt_path=ckpt_path)
            trainer.callback_metrics  # noqa: B018 — every rank: reading it reduces what is left (a collective)
            break
        except SIGTERMException as err:  # Lightning's own, at an epoch's end: the last checkpoint is the resume point
            if isinstance(err, StoppedBySignal):
                raise
            saved = [cb._last_global_step_saved for cb in trainer.checkpoint_callbacks]  # noqa: SLF001
            raise StoppedBySignal(max(saved, default=0), roles.last_path) from err
        except torch.OutOfMemoryError as err:
            if not settings.auto_batch_scaling or plan.micro_batch_size <= 1:
                raise
            ckpt_path = _retry_smaller(setup, roles, notify, trainer, err)
    return trainer, roles


def _retry_smaller(setup: RunSetup, roles: RunCallbacks, notify: Callable[[Alert], None], trainer: L.Trainer,
                   err: BaseException) -> str | None:
    """Halve the micro-batch, double the accumulation; return the checkpoint to continue from (or None)."""
    plan = setup.plan
    old = (plan.micro_batch_size, plan.accumulate_grad_batches)
    plan.micro_batch_size //= 2
    plan.accumulate_grad_batches *= 2
    plan.decisions.append(Decision(
        "oom_retry", f"{plan.micro_batch_size} × {plan.accumulate_grad_batches}",
        f"out of memory at step {trainer.global_step} with micro-batch {old[0]}: halved it, doubled accumulation",
    ))
    if setup.record is not None:
        setup.store.update(setup.record.id, plan=plan.to_dict())
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    fs, path = filesystem(roles.last_path)
    resume_from = roles.last_path if fs.exists(path) else None
    notify(Alert(AlertKind.OOM, AlertAction.RETRY,
                 f"{str(err).splitlines()[0][:160]} — retrying with micro-batch {plan.micro_batch_size} × "
                 f"accumulation {plan.accumulate_grad_batches} from "
                 f"{'the last checkpoint' if resume_from else 'the start'}",
                 rule="out of memory", step=trainer.global_step, epoch=trainer.current_epoch,
                 details={"micro_batch_size": plan.micro_batch_size,
                          "accumulate_grad_batches": plan.accumulate_grad_batches,
                          "effective_batch_size": plan.effective_batch_size}))
    if resume_from is None:  # nothing saved yet: start again from the same initial weights
        L.seed_everything(setup.settings.seed, workers=True, verbose=False)
        setup.algorithm.configure_data(setup.prepared.spec)
    return resume_from


def _finish(setup: RunSetup, trainer: L.Trainer, roles: RunCallbacks) -> FitResult:
    store, record, plan, prepared = setup.store, setup.record, setup.plan, setup.prepared
    assert record is not None  # rank 0 only
    ckpt_dir = store.path(record.id, "checkpoints")
    metric = setup.algorithm.monitor[0]
    stopped = roles.stopped_by
    if trainer.interrupted:
        store.end_run(record.id, RunStatus.FAILED, "interrupted")
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    best, meter = roles.best, roles.utilisation
    best_path = _uri(best.best_model_path, ckpt_dir)
    fs, last_local = filesystem(roles.last_path)
    last_path = roles.last_path if fs.exists(last_local) else None
    merge_history(store.path(record.id, "logs"))  # a restarted run: its earlier attempts' rows come first
    best_score = float(best.best_model_score) if best.best_model_score is not None else None
    if not metrics:  # resumed after its last step (killed between its last epoch and here): it logged nothing
        metrics, logged_best = last_logged(store.path(record.id, "logs", "metrics.csv"), metric,
                                           setup.algorithm.monitor[1])
        best_score = best_score if best_score is not None else logged_best
    plot_curves(store.path(record.id, "logs", "metrics.csv"), store.path(record.id, "curves.png"),
                f"{record.uri} · {record.algorithm}")
    measured = {
        "micro_batch_size": plan.micro_batch_size,
        **({"pipeline_stages": plan.layout.pipeline} if plan.layout.pipeline_enabled else {}),
        "seconds_per_sample": meter.compute_seconds / meter.samples if meter.samples else None,
        "train_seconds": round(meter.compute_seconds, 3),
        # Lightning's fit, and the whole fit from reading the data, against the plan's estimate of the training
        # (the next plan of the kind adds what the whole fit spent beyond it, its probe apart: past_overhead)
        "fit_seconds": round(meter.fit_seconds, 3) if meter.fit_seconds else None,
        "run_seconds": round(time.perf_counter() - setup.started, 3) if setup.started is not None else None,
        "probe_seconds": plan.estimates.get("estimated_probe_seconds"),  # a probe measured for this run
        "estimated_train_seconds": _estimated_train_seconds(
            plan, setup.continuation is not None and setup.continuation.mode == "resume"),
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        **measured_bytes(trainer.strategy),
        **meter.figures(
            float(plan.estimates.get("flops_per_sample") or 0), trainer.world_size, plan.accelerator,
            torch.cuda.get_device_name() if plan.accelerator == "cuda" and torch.cuda.is_available() else "cpu",
            peak_precision(plan, roles), plan.torch_threads,
            tokens_per_sample(prepared.spec.input_shape, prepared.spec.input_dtype),
            plan.layout.model_parallel, home=store.home),
        **(roles.precision.figures() if roles.precision is not None else {}),
    }
    status = "failed" if trainer.interrupted else "stopped" if stopped else "finished"
    if roles.reporter is not None:
        send_run_files(store, record, roles.reporter)
        measured["trackers"] = roles.reporter.close(status)
    final = store.update(
        record.id, status=status, metrics={**metrics, f"best_{metric}": best_score}, measured=measured,
        best_checkpoint=best_path or last_path, finished=time.time(), plan=plan.to_dict(),
        error=stopped.message if stopped else None,
    )
    return FitResult(
        run_uri=record.uri, status=final.status, metrics=metrics, best_metric=best_score, monitor=metric,
        best_checkpoint=best_path, last_checkpoint=last_path, plan=plan, data_fingerprint=prepared.fingerprint,
        run_dir=store.run_dir(record.id), parent=run_uri(record.parent) if record.parent else None,
        alerts=final.alerts, stop_reason=stopped.message if stopped else None,
    )


def _open_reporter(setup: RunSetup) -> Reporter | None:
    """The run's reporter to ``report_to``'s trackers, its parameters and tags queued (rank 0; ``None`` for no
    trackers)."""
    record = setup.record
    if record is None or not setup.settings.report_to:
        return None
    continuation = setup.continuation
    parent = continuation.parent_run if continuation is not None and continuation.parent_run else None
    params = {**record.hyperparams, **{f"plan.{d.name}": d.value for d in setup.plan.decisions}}
    return open_run_reporter(setup.store, record, setup.settings.report_to, params,
                             {"twinkle.data_uri": record.data_uri,
                              "twinkle.data_fingerprint": setup.prepared.fingerprint},
                             parent if parent != record.uri else None)


def _close_reporter(setup: RunSetup, reporter: Reporter | None, status: str) -> None:
    """A run that failed or stopped: its trackers told so (what they sent kept in the run's record)."""
    if reporter is None or setup.record is None:
        return
    summary = reporter.close(status)
    record = setup.store.catalogue.get(setup.record.id)
    measured = dict(record.measured) if record is not None else {}
    setup.store.update(setup.record.id, measured={**measured, "trackers": summary})


def _estimated_train_seconds(plan: Plan, resumed: bool) -> float | None:
    """The plan's estimate of the training alone (without the overhead an earlier run measured and the plan's own
    probe), if it made one; ``None`` for a resumed run, whose fit trains only what was left."""
    seconds = plan.estimates.get("estimated_seconds")
    if seconds is None or resumed:
        return None
    return round(float(seconds) - float(plan.estimates.get("estimated_overhead_seconds") or 0.0)
                 - float(plan.estimates.get("estimated_probe_seconds") or 0.0), 6)


def _uri(path: str, folder: str) -> str | None:
    if not path:
        return None
    fs, _ = filesystem(folder)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol == "file" or "://" in path else f"{protocol}://{path}"
