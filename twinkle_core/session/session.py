"""``Session``: one training in this process — the algorithm and task chosen, the hyperparameters checked and
routed to their owners, the data prepared, a checkpoint continued, the plan made, the engine run and the run stored.

``Trainer`` is the facade over it (it adds what leaves the process: Ray, supervised workers,
exports, tuning); the jobs layer builds a session from a ``Job``'s spec. One fit flows:

```text
Session(...)            a TrainingSpec, resolved once: selection and hyperparameter checking (twinkle_core.spec)
  .prepare(uri)         the processor reads the data; the algorithm is built for it  -> Prepared
  .plan(data)           measured model and data, hardware, history -> Plan (planning)
  .fit(data)            rank 0 records the run (RunRecorder), the engine trains it (engine.run) -> FitResult
```

Evaluate, predict and export on the trained model are ``TrainedModel``'s (``Session.trained``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import lightning as L
from torch.utils.data import IterableDataset

from twinkle_core.algorithm import Algorithm
from twinkle_core.components import Component
from twinkle_core.data.processor import DataProcessor, PrepareContext, PreparedData, prepare_data
from twinkle_core.data.spec import DataSpec, ModelInput
from twinkle_core.engine import continuation as cont
from twinkle_core.engine.checkpoints import TWINKLE_KEY, WEIGHTS_ONLY_KEY, load_checkpoint
from twinkle_core.engine.evaluation import Evaluation
from twinkle_core.engine.prediction import Predictions
from twinkle_core.engine.probes import probe_for_plan
from twinkle_core.engine.ranks import is_global_zero
from twinkle_core.engine.record import CheckpointRecord, class_path, restore_algorithm, restore_processor
from twinkle_core.engine.reshape import reshape_to_state
from twinkle_core.engine.result import FitResult
from twinkle_core.engine.run import RunSetup, run_lightning
from twinkle_core.engine.selection import choose_processor, choose_strategy
from twinkle_core.engine.settings import Routed, route
from twinkle_core.engine.utilisation import tokens_per_sample
from twinkle_core.errors import TwinkleError
from twinkle_core.hyperparams import recorded
from twinkle_core.ops.budget import BudgetConfig
from twinkle_core.ops.memory import scale_batch
from twinkle_core.ops.monitor import MonitorConfig
from twinkle_core.planning import (DataLoadingDecider, Hardware, PastRun, Plan, PlanContext, PlanningError,
                                   measure_example)
from twinkle_core.session.recording import RunRecorder
from twinkle_core.session.trained import TrainedModel
from twinkle_core.spec import ContinueFrom, TrainingSpec, resolve
from twinkle_core.spec.resolution import processor_class
from twinkle_core.store.runs import RunStore
from twinkle_core.uris import is_store_uri, size_of


@dataclass
class Prepared:
    """What ``Session.prepare`` made of one data URI.

    Attributes:
        uri: the data's URI, resolved.
        data: the processor's ``PreparedData`` (splits, spec, fingerprint).
        algorithm: the algorithm, configured for the data (and holding the continued checkpoint's weights).
        component: the data processor's registration (``None``: a processor instance the user configured).
        routed: the hyperparameters split by owner (algorithm, processor, trainer).
    """

    uri: str
    data: PreparedData
    algorithm: Algorithm
    component: Component | None
    routed: Routed


class Session:
    """One training in this process (see the module's description); the arguments are
    ``Trainer``'s, plus the monitor and budget settings ``Trainer.monitor`` and
    ``Trainer.set_budget_alert`` make.

    Raises:
        UnknownComponentError: an unknown algorithm, task, processor or strategy name.
        HyperparameterError: an unknown hyperparameter name or a badly typed value (before anything runs).
    """

    def __init__(
        self,
        algorithm: str | type[Algorithm],
        task: str | None = None,
        hyperparams: dict[str, Any] | None = None,
        *,
        data_processor: str | DataProcessor | None = None,
        resource_strategy: str | None = None,
        user: str | None = None,
        project: str | None = None,
        home: str | None = None,
        verbose: bool = True,
        callbacks: list[L.Callback] | None = None,
        monitor: MonitorConfig | None = None,
        budget: BudgetConfig | None = None,
        **options: Any,
    ) -> None:
        """Resolve the algorithm and task and check every hyperparameter name and type now (``resolve``)."""
        self._start(TrainingSpec.of(algorithm, task, hyperparams, data_processor=data_processor,
                                    resource_strategy=resource_strategy, user=user, project=project, home=home,
                                    callbacks=callbacks, monitor=monitor, budget=budget, **options), verbose)

    @classmethod
    def from_spec(cls, spec: TrainingSpec, *, verbose: bool = True) -> Session:
        """The session of ``spec`` (resolved now, as ``Session(...)`` resolves the spec it builds); a spec that
        continues from a checkpoint (``spec.continues``) is ``from_checkpoint``'s session, its hyperparameters
        overriding the checkpoint's."""
        if spec.continues is not None:
            given = {"data_processor": spec.data_processor, "resource_strategy": spec.resource_strategy,
                     "user": spec.user, "project": spec.project, "home": spec.home, "monitor": spec.monitor,
                     "budget": spec.budget, "callbacks": list(spec.callbacks) or None}
            return cls.from_checkpoint(spec.continues.checkpoint, None, spec.continues.mode, dict(spec.hyperparams),
                                       algorithm=spec.algorithm, same_run=spec.continues.same_run, verbose=verbose,
                                       **{k: v for k, v in given.items() if v is not None})
        session = cls.__new__(cls)
        session._start(spec, verbose)
        return session

    def _start(self, spec: TrainingSpec, verbose: bool) -> None:
        """Resolve ``spec`` and start with nothing prepared, trained or continued."""
        resolved = resolve(spec)
        self.resolved = resolved
        """The spec this session was made from, resolved (``Session.spec``: as it is now)."""
        self.algorithm_ref, self.choice, self.task = spec.algorithm, resolved.choice, resolved.task
        self.hyperparams, self.settings = resolved.hyperparams, resolved.settings
        self.data_processor, self.resource_strategy = spec.data_processor, spec.resource_strategy
        self.user, self.project = spec.user, spec.project
        self.store = RunStore(spec.home)
        self.verbose = verbose
        self.callbacks = list(spec.callbacks)
        self.continuation: cont.Continuation | None = None
        self.new_data: str | None = resolved.data
        self.algorithm: Algorithm | None = None
        self.result: FitResult | None = None
        self.prepared: PreparedData | None = None
        """The data the last ``fit`` trained on."""
        self.trained_hyperparams: dict[str, Any] = {}
        """The algorithm's hyperparameters, as the last ``fit`` built it."""
        self.shared_data: dict[tuple[Any, ...], PreparedData] | None = None
        """Prepared data kept for reuse by this session's variants (a tuning study prepares its data once)."""
        self._detected: Hardware | None = None
        self._routes: dict[str, tuple[Component | None, Routed]] = {}
        self.best_checkpoint: str | None = None
        """For a session from a checkpoint: the checkpoint ``evaluate`` scores (a run's best, or the file given)."""
        self.reuse_run: str | None = None
        """A run to train into instead of creating one (a job restarted before its first checkpoint)."""
        self.run_created: Callable[[str], None] | None = None
        """Called with the run's URI as soon as rank 0 has created or reopened it."""
        self.monitor_config, self.budget_config = spec.monitor, spec.budget
        self.trained = TrainedModel(self)
        """What is asked of the model this session trained or continues: export, evaluate, predict."""

    @property
    def spec(self) -> TrainingSpec:
        """What this session trains, as one value: the spec it was made from, with the monitor rules and budget
        set on it since (``Trainer.monitor``, ``Trainer.set_budget_alert``)."""
        return self.resolved.spec.replace(monitor=self.monitor_config, budget=self.budget_config)

    def variant(self, hyperparams: dict[str, Any], **kwargs: Any) -> Session:
        """A new session like this one with ``hyperparams`` merged over its own (monitor, budget and shared data
        kept); ``kwargs``: other fields of its spec to change (``project=``, ``callbacks=``) and ``verbose``."""
        verbose = kwargs.pop("verbose", self.verbose)
        if "callbacks" in kwargs:
            kwargs["callbacks"] = tuple(kwargs["callbacks"] or ())
        spec = self.spec.replace(hyperparams={**self.hyperparams, **hyperparams}, home=self.store.home,
                                 continues=None, **kwargs)  # a variant trains afresh (a tuning trial)
        other = Session.from_spec(spec, verbose=verbose)
        other.shared_data = self.shared_data
        other.new_data = self.new_data  # data named by keyword (voice_samples=...) or by from_checkpoint
        return other

    def valid_hyperparameters(self) -> set[str]:
        """Every name ``hyperparams`` accepts: the algorithm's, the data processors' and the trainer's."""
        return self.resolved.valid_hyperparameters()

    def route_for(self, uri: str) -> tuple[Any, Any]:
        """Route the hyperparameters to the processor that reads ``uri`` — once per URI: prepare, plan, evaluate,
        predict and an export's card read the same routing."""
        if uri not in self._routes:
            if isinstance(self.data_processor, DataProcessor):  # configured by the user: no data hyperparameters
                self._routes[uri] = None, route(self.hyperparams, self.choice.cls.hyperparameters(), {},
                                                trainer=self.settings)
            else:
                component = choose_processor(self.task, uri, self.data_processor)
                self._routes[uri] = component, route(self.hyperparams, self.choice.cls.hyperparameters(),
                                                     processor_class(component).parameters(), trainer=self.settings)
        component, routed = self._routes[uri]
        return component, replace(routed)  # a copy: a configured processor's values are set on it

    def processor_for(self, uri: str) -> tuple[DataProcessor, Component | None, Routed]:
        """The data processor that reads ``uri`` (configured with its routed hyperparameters), its registration
        (``None``: one the user configured) and the routed hyperparameters."""
        component, routed = self.route_for(uri)
        if component is None:
            processor = self.data_processor
            if processor.task != self.task:  # type: ignore[union-attr]
                raise TwinkleError(f"{type(processor).__name__} serves {processor.task}, not {self.task}")  # type: ignore[union-attr]
            routed.data = {name: getattr(processor, name) for name in processor.parameters() if hasattr(processor, name)}  # type: ignore[union-attr]
        else:
            processor = component.load().from_params(routed.data, task=self.task, typed=True)
        return processor, component, routed  # type: ignore[return-value]

    def prepare(self, uri: str) -> Prepared:
        """Read ``uri`` with the chosen processor and build the algorithm for it (weights from the continuation,
        when there is one); nothing is trained or stored."""
        processor, component, routed = self.processor_for(uri)
        source_bytes = _source_bytes(uri)
        algorithm = self.choice.cls.from_hyperparams(routed.algorithm, task=self.task, typed=True)
        context = PrepareContext(
            home=self.store.home,  # derived data is cached in the store this session uses
            sharded=DataLoadingDecider.needs_shards(  # data larger than memory: stream it in shards
                source_bytes, self.hardware().memory_bytes, self.settings.memory_limit_bytes),
            model_input=self.model_input_for(algorithm), seed=self.settings.seed)
        key = (uri, component.qualified_name if component else id(processor), repr(sorted(routed.data.items())),
               self.settings.seed, repr(context.model_input))
        prepared = self.shared_data.get(key) if self.shared_data is not None else None
        if prepared is None:
            prepared = prepare_data(processor, uri, context)
            if self.shared_data is not None:
                self.shared_data[key] = prepared
        prepared.size_bytes = max(prepared.size_bytes, source_bytes)  # what the loading decision was made on
        prepared.details = {**prepared.sample_counts(), **prepared.details}  # the same names for every processor
        if self.continuation is not None:
            self.continuation.check_data(prepared.fingerprint, uri)
        L.seed_everything(self.settings.seed, workers=True, verbose=False)
        self.build_network(algorithm, prepared.spec)
        if self.continuation is not None and self.continuation.mode != "resume":
            spec = self.continuation.record.data_spec
            state = algorithm.adapt_checkpoint(self.continuation.state_dict,
                                               DataSpec.from_dict(spec) if spec else None, prepared.spec)
            cont.check_compatible(state, algorithm.state_dict(), self.continuation.checkpoint_uri)
            algorithm.load_state_dict(state)
        return Prepared(uri, prepared, algorithm, component, routed)

    def model_input_for(self, algorithm: Algorithm) -> ModelInput | None:
        """What the model wants from its input; a continued run keeps the input size its parent trained at and
        the tokenizer its parent's data was encoded with."""
        wanted = algorithm.model_input()
        spec = self.continuation.record.data_spec if self.continuation is not None else None
        tokenizer = (spec or {}).get("extra", {}).get("tokenizer")
        if tokenizer:
            wanted = replace(wanted or ModelInput(), tokenizer=str(tokenizer))
        if wanted is None or not spec or len(spec.get("input_shape", ())) != 3:
            return wanted
        height, width = (int(v) for v in spec["input_shape"][1:])
        parent = self.continuation.parent_run or self.continuation.checkpoint_uri  # type: ignore[union-attr]
        return replace(wanted, size=(height, width), fixed=True,
                       reason=f"the size {parent} was trained at ({self.continuation.mode})")  # type: ignore[union-attr]

    def hardware(self) -> Hardware:
        """This machine (and the launcher's world), detected once per session."""
        if self._detected is None:
            self._detected = Hardware.detect()
        return self._detected

    def _plan(self, ready: Prepared) -> Plan:
        prepared, algorithm = ready.data, ready.algorithm
        hardware = self.hardware()
        facts = measure_example(algorithm)
        history = self.store.history(self.choice.name, prepared.fingerprint, hardware.key)
        probe, probe_note = probe_for_plan(self.settings, hardware, algorithm, prepared.train, prepared.collate_fn,
                                           self.store.home)
        context = PlanContext(
            algorithm_name=self.choice.name,
            task=self.task,
            facts=facts,
            data_bytes=prepared.size_bytes,
            train_samples=len(prepared.train),
            batch_size=self.settings.batch_size,
            effective_batch_size=self.settings.effective_batch_size,
            max_epochs=self.settings.max_epochs,
            hardware=hardware,
            history=[PastRun.from_record(r) for r in history],
            overrides=self.settings.overrides(),
            supports_mixed_precision=algorithm.supports_mixed_precision,
            memory_limit_bytes=self.settings.memory_limit_bytes,
            data_sharded=isinstance(prepared.train, IterableDataset),
            # a sample of several rows (RL's group of completions) is not the data's tokens: its figures stay per sample
            tokens_per_sample=tokens_per_sample(prepared.spec.input_shape, prepared.spec.input_dtype)
            if algorithm.rows_per_sample == 1 else None,
            splits_tensors=algorithm.splits_tensors(),
            cuts_stages=algorithm.cuts_stages(),
            max_steps=self.settings.max_steps,
            val_check_interval=self.settings.val_check_interval,
            min_optimizer_steps=algorithm.min_optimizer_steps,
            probe=probe,
            probe_note=probe_note,
            val_samples=0 if isinstance(prepared.val, IterableDataset) or prepared.val is None else len(prepared.val),
            optimizer_kernel=algorithm.optimizer_kernel_name(),
            checkpoint_every_n_steps=self.settings.checkpoint_every_n_steps,
            updates_per_batch=algorithm.updates_per_batch,
        )
        strategy = choose_strategy(self.task, self.resource_strategy).load()()
        plan = strategy.plan(context)
        plan.decisions.extend(prepared.decisions)  # the data processor's choices (an input size, say)
        plan.decisions.extend(algorithm.plan_decisions(plan))  # the algorithm's (reinforcement learning's rollouts)
        return plan

    # ----------------------------------------------------------------- public
    def plan(self, data: str | None = None) -> Plan:
        """Measure the model and data and return the resource plan (nothing is trained or stored)."""
        return self._plan(self.prepare(self.data_uri(data)))

    def fit(self, data: str | None = None) -> FitResult:
        """Train on ``data`` (any URI; default: ``new_data``) in this process, as a new run — or, continuing
        with ``same_run`` or ``reuse_run``, in that run."""
        started = time.perf_counter()
        ready = self.prepare(self.data_uri(data))
        uri, prepared, algorithm = ready.uri, ready.data, ready.algorithm
        component, routed = ready.component, ready.routed
        plan = self._plan(ready)
        if self.settings.auto_batch_scaling:
            scale_batch(plan, algorithm, prepared.train, self.settings.memory_limit_bytes, prepared.collate_fn)
        if plan.num_nodes > 1 and not self.hardware().launcher and not os.environ.get("MASTER_ADDR"):
            raise PlanningError(f"num_nodes={plan.num_nodes} needs the processes of every node started together: run "
                                "`twinkle launch ... --nodes N` and start its command on each node (or set "
                                "MASTER_ADDR, MASTER_PORT and NODE_RANK on each)")
        if plan.strategy == "pipeline" and not self.hardware().launcher and int(os.environ.get("WORLD_SIZE", "1")) < 2:
            raise PlanningError("strategy='pipeline' runs one stage per process, and this job has one process: start "
                                "it with `twinkle launch ALGORITHM --devices N --hp strategy=pipeline --run`")
        lead = is_global_zero()  # one run per job: rank 0 creates it and writes everything
        if self.verbose and lead:
            print(plan.explain(), flush=True)
        recorder = RunRecorder(self.store, self.user, self.project, self.run_created)  # rank 0 records the run
        record = recorder.record(uri, prepared, plan, algorithm=self.choice.name, task=self.task, hyperparams=recorded({
            **routed.algorithm, **routed.data, **self.settings.to_dict()}), hardware=self.hardware().key,
            continuation=self.continuation, reuse_run=self.reuse_run) if lead else None
        checkpoint_record = CheckpointRecord(
            algorithm=self.choice.name,
            target=class_path(self.choice.cls),
            task=self.task,
            hyperparams=recorded(routed.algorithm),  # code (a reward function) by its name: a record is data
            data_processor=component.qualified_name if component is not None else None,
            data_processor_class=None if component is not None else class_path(type(self.data_processor)),
            data_params=dict(routed.data),
            trainer=self.settings.to_dict(),
            data_spec=prepared.spec.to_dict(),
            data_uri=uri,
            data_fingerprint=prepared.fingerprint,
            run=record.uri if record is not None else None,
            structure=self.continuation.record.structure if self.continuation is not None else None,
        )
        setup = RunSetup(
            store=self.store, record=record, algorithm=algorithm, prepared=prepared, plan=plan,
            settings=self.settings, checkpoint_record=checkpoint_record, continuation=self.continuation,
            verbose=self.verbose, callbacks=self.callbacks, monitor=self.monitor_config, budget=self.budget_config,
            started=started,
        )
        self.result = run_lightning(setup)
        self.algorithm, self.prepared, self.trained_hyperparams = algorithm, prepared, dict(routed.algorithm)
        return self.result

    # ---------------------------------------------------------- continuation
    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str,
        new_data: str | None = None,
        mode: str = "continue",
        hyperparams: dict[str, Any] | None = None,
        *,
        algorithm: str | type[Algorithm] | None = None,
        same_run: bool = False,
        **options: Any,
    ) -> Session:
        """A session that continues from a run or checkpoint; the arguments are
        ``Trainer.from_checkpoint``'s."""
        continues = ContinueFrom(checkpoint, mode, same_run)  # checks the mode
        keys = {f.name for f in dataclasses.fields(TrainingSpec)} - {"algorithm", "task", "hyperparams",
                                                                      "continues"} | {"verbose"}
        kwargs = {k: options.pop(k) for k in list(options) if k in keys}  # the spec's other fields, not hyperparameters
        store = RunStore(kwargs.get("home"))
        uri = _checkpoint_uri(store, checkpoint, mode)
        ckpt = load_checkpoint(uri, tensors=False)  # a sharded folder: its meta.pt only, until weights are needed
        record = CheckpointRecord.from_dict(ckpt.get(TWINKLE_KEY), uri)
        if mode == "resume" and ckpt.get(WEIGHTS_ONLY_KEY):
            raise cont.CheckpointError(f"'{uri}' is a run's best checkpoint: it keeps the weights, not the optimizer's "
                                       "state, so it cannot resume the training exactly; resume from the run (its "
                                       "last.ckpt), or use mode='continue' or 'finetune' with this file")
        target = restore_algorithm(record, uri, algorithm)  # nothing named in the checkpoint is imported
        processor = restore_processor(record, uri, kwargs.get("data_processor"))
        if record.run:
            parent_user, parent_project, _ = store.run_id(record.run).split("/")
            kwargs.setdefault("user", parent_user)
            kwargs.setdefault("project", parent_project)
        data_params = dict(record.data_params)
        if isinstance(processor, DataProcessor):  # a processor the user configured: rebuilt with its values
            kwargs["data_processor"] = processor
            data_params = {}
        values = {**record.hyperparams, **data_params, **record.trainer}
        if mode != "resume":
            values = {k: v for k, v in values.items() if v is not None}
        session = cls(target, record.task, {**values, **(hyperparams or {}), **options}, **kwargs)
        session.continuation = cont.Continuation(
            mode=mode,
            checkpoint_uri=uri,
            record=record,
            global_step=int(ckpt.get("global_step", 0)),
            same_run=same_run,
            loaded=ckpt,
        )
        if same_run and not record.run:
            raise TwinkleError(f"checkpoint '{uri}' names no run to resume into; drop same_run=True")
        session.new_data = new_data or record.data_uri
        session.best_checkpoint = _checkpoint_uri(store, checkpoint, "finetune")  # what evaluate and predict score
        session.resolved.spec = session.resolved.spec.replace(continues=continues)
        return session

    def data_uri(self, data: str | None) -> str:
        """The URI ``data`` names (default: ``new_data``), resolved in this session's store."""
        uri = data or self.new_data
        if uri is None:
            raise TwinkleError("no data: pass fit(data='path or URI')")
        return self.store.resolve(str(uri))  # twinkle:// data lives in this session's store

    def model_for_export(self) -> tuple[Algorithm, PreparedData, str | None, str | None]:
        """The model to export (best checkpoint's weights), its data, its run URI and checkpoint URI
        (``TrainedModel.model_for_export``)."""
        return self.trained.model_for_export()

    def evaluate(self, data: str, *, batch_size: int | None = None, output: str | None = None) -> Evaluation:
        """Score the trained model on labelled data and store the evaluation with its run
        (``TrainedModel.evaluate``)."""
        return self.trained.evaluate(data, batch_size=batch_size, output=output)

    def predict(self, data: Any, output: str | None = None, *, batch_size: int | None = None, devices: int = 1,
                overwrite: bool = False, draw: bool = False) -> Predictions:
        """Predict every sample of ``data`` with the trained model (``TrainedModel.predict``)."""
        return self.trained.predict(data, output, batch_size=batch_size, devices=devices, overwrite=overwrite,
                                    draw=draw)

    def inference_card(self, model: Algorithm, prepared: PreparedData, run_uri: str | None,
                       checkpoint: str | None) -> dict[str, Any]:
        """The inference card of an export of ``model`` (``TrainedModel.inference_card``)."""
        return self.trained.inference_card(model, prepared, run_uri, checkpoint)

    def build_network(self, algorithm: Algorithm, spec: DataSpec) -> None:
        """Build ``algorithm``'s network for data shaped like ``spec`` — with gradient checkpointing when asked,
        and in a pruned parent's form and shapes (from its tensors; nothing pickled)."""
        algorithm.configure_data(spec)
        if self.settings.gradient_checkpointing:
            algorithm.enable_gradient_checkpointing()
        if self.continuation is not None and self.continuation.record.structure:
            algorithm.prunable_network()
            reshape_to_state(algorithm, self.continuation.state_dict)


def _source_bytes(uri: str) -> int:
    """The data's size from storage listings, or 0 when the URI is one only its processor understands."""
    try:
        return size_of(uri)
    except (TwinkleError, OSError, ValueError):
        return 0


def _checkpoint_uri(store: RunStore, ref: str, mode: str) -> str:
    if ref.endswith(".ckpt") or not is_store_uri(ref):
        return store.resolve(ref)  # a twinkle://models/... file lives in this store
    record = store.get(ref)
    last = store.path(record.id, "checkpoints", "last.ckpt")
    if mode == "finetune" and record.best_checkpoint:
        return record.best_checkpoint
    return last


__all__ = ["Prepared", "Session"]
