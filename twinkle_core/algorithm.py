"""``Algorithm``: a Lightning module with a task, declared hyperparameters and sensible defaults.

A user brings a model by subclassing:

```python
class KronosModel(Algorithm):
    def __init__(self, n_heads: int = 8, d_model: int = 256) -> None:
        super().__init__(task="time_series_forecasting")
        self.n_heads, self.d_model = n_heads, d_model

    def build_model(self, spec):            # input sizes come from the data
        return MyTransformer(spec.num_features, self.n_heads, self.d_model)
```

The typed keyword arguments of ``__init__`` are the algorithm's hyperparameters; ``lr``, ``optimizer``,
``weight_decay``, ``scheduler`` and ``momentum`` are added for every algorithm and drive the default
``Algorithm.configure_optimizers``. Classification and regression get a default loss, metrics and
steps, so a subclass often only builds its network.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Mapping

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F

from twinkle_core.data.spec import DataSpec, ModelInput
from twinkle_core.errors import TwinkleError
from twinkle_core.hyperparams import Hyperparameter, declared, recorded, validate, with_new_names
from twinkle_core.metrics import EvaluationReport
from twinkle_core.parallel import tied_names
from twinkle_core.tasks import Task, get_task
from twinkle_core.types import NonNegativeFloat, PositiveFloat, Probability

if TYPE_CHECKING:
    from twinkle_core.planning import Decision
    from twinkle_core.planning.plan import Plan


def batch_size_of(batch: Any) -> int:
    """The number of samples in a batch: the first dimension of its first tensor (``img`` for dicts)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        first = batch.get("img", next((v for v in batch.values() if isinstance(v, torch.Tensor)), None))
        return batch_size_of(first) if first is not None else 1
    if isinstance(batch, (tuple, list)) and batch:
        return batch_size_of(batch[0])
    return 1


@dataclass
class OptimizerSettings:
    """The optimizer hyperparameters every algorithm has.

    Attributes:
        lr: the peak learning rate.
        optimizer: ``"adamw"``, ``"adam"`` or ``"sgd"`` (with Nesterov momentum).
        weight_decay: decoupled (AdamW) or L2 (Adam, SGD) weight decay.
        scheduler: ``"none"``, ``"cosine"`` (to zero over the run), ``"onecycle"`` or ``"step"`` (×0.1 at
            60 % and 85 % of the run).
        momentum: SGD momentum.
    """

    lr: PositiveFloat = 1e-3
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    weight_decay: NonNegativeFloat = 0.0
    scheduler: Literal["none", "cosine", "onecycle", "step"] = "none"
    momentum: Probability = 0.9


class Algorithm(L.LightningModule):
    """Base class of every Twinkle algorithm (a ``lightning.LightningModule``).

    Class attributes a subclass may set:
        task: the task when ``__init__`` does not pass one.
        optimizer_defaults: overrides of ``OptimizerSettings`` defaults (``{"lr": 3e-4}``).
        supports_mixed_precision: ``False`` keeps the planner from choosing 16-bit precision.
        data_keyword: a keyword ``Trainer(...)`` takes as the data's URI for this algorithm, so that ``fit()``
            needs no argument (MelOTTS: ``Trainer(algorithm=MelOTTS, voice_samples="s3://...")``).
        renamed_hyperparameters: old names of hyperparameters (old → new), still accepted for a release with a
            ``DeprecationWarning`` that names the new one.
        prediction_file: the file ``predict`` writes in the run's ``predictions/<N>/`` when given no output
            (``predictions.csv``; a detector's ``predictions.json``, COCO's shape).
    """

    task: str | None = None
    optimizer_defaults: ClassVar[dict[str, Any]] = {}
    data_keyword: ClassVar[str | None] = None
    renamed_hyperparameters: ClassVar[dict[str, str]] = {}
    supports_mixed_precision: ClassVar[bool] = True
    """Whether the algorithm trains safely in 16-bit (the planner keeps fp32 when not)."""
    prediction_file: ClassVar[str] = "predictions.csv"
    """The file ``predict`` writes in the run's ``predictions/<N>/`` folder when the caller names none."""

    weights_report: Any = None
    """What ``build_model`` loaded from ``weights=`` (a ``twinkle_core.pretrained.WeightsReport``, set by the
    algorithm that loads them); the engine writes it into the run as ``weights.json``."""

    def __init__(self, task: str | None = None) -> None:
        """Set the task (checked against the known tasks) and default optimizer settings."""
        super().__init__()
        resolved = task or type(self).task
        if not resolved:
            raise TwinkleError(
                f"{type(self).__name__} declares no task; call super().__init__(task='...') "
                "or set the class attribute task"
            )
        self._task_info = get_task(resolved)
        self.task = self._task_info.name
        self.optim = OptimizerSettings(**type(self).optimizer_defaults)
        self.data_spec: DataSpec | None = None
        self.model: nn.Module | None = None
        self._pipeline: Any = None  # this rank's pipeline stages, when the run is pipelined (configure_model)

    # ------------------------------------------------------------ hyperparameters
    @classmethod
    def hyperparameters(cls) -> dict[str, Hyperparameter]:
        """Every hyperparameter this algorithm takes: its ``__init__`` keywords plus the optimizer's."""
        optim_defaults = asdict(OptimizerSettings(**cls.optimizer_defaults))
        optim = {
            name: Hyperparameter(name, hp.annotation, optim_defaults[name], "optimizer")
            for name, hp in declared(OptimizerSettings.__init__, "optimizer").items()
        }
        own = declared(cls.__init__, "algorithm") if cls.__init__ is not Algorithm.__init__ else {}
        return {**optim, **own}

    @classmethod
    def from_hyperparams(cls, hyperparams: Mapping[str, Any] | None = None, task: str | None = None, *,
                         typed: bool = False) -> Algorithm:
        """Validate ``hyperparams`` against ``hyperparameters`` and build the algorithm (``typed``: the
        values were already coerced, as ``Trainer`` routes them once).

        Raises:
            HyperparameterError: an unknown key (the message lists the valid ones) or a badly typed value.
        """
        declared_hps = cls.hyperparameters()
        given = with_new_names(hyperparams or {}, cls.renamed_hyperparameters, cls.__name__)
        values = validate(declared_hps, given, cls.__name__, typed=typed)
        own = {k: v for k, v in values.items() if declared_hps[k].owner == "algorithm"}
        if task is not None and "task" in inspect.signature(cls.__init__).parameters:
            own["task"] = task
        algorithm = cls(**own)
        if task is not None and algorithm.task != task:
            raise TwinkleError(
                f"{cls.__name__} is a {algorithm.task} algorithm, not {task}; drop task= or pick another algorithm"
            )
        for name, value in values.items():
            if declared_hps[name].owner == "optimizer":
                setattr(algorithm.optim, name, value)
        # Lightning writes hparams into every checkpoint: code (a reward function) only by its name
        algorithm.hparams.update(recorded({**own, **asdict(algorithm.optim)}))
        return algorithm

    # ---------------------------------------------------------------- the model
    def configure_data(self, spec: DataSpec) -> None:
        """Receive the data's ``DataSpec`` and build the network from it (called before training)."""
        self.data_spec = spec
        model = self.build_model(spec)
        if model is not None:
            self.model = model

    def build_model(self, spec: DataSpec) -> nn.Module | None:
        """Return the network for data shaped like ``spec`` (default: ``None``, the subclass built it)."""
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the network built by ``build_model`` (through every stage when pipelined)."""
        if self._pipeline is not None:
            return self._pipeline.forward(x)
        if self.model is None:
            raise TwinkleError(
                f"{type(self).__name__} has no network: implement build_model(spec) or forward(x)"
            )
        return self.model(x)

    def adapt_checkpoint(
        self, state_dict: dict[str, Any], old: DataSpec | None, new: DataSpec
    ) -> dict[str, Any]:
        """Adapt weights trained on data shaped like ``old`` to a model built for ``new`` (default: as is).

        ``continue`` and ``finetune`` call it before loading; a subclass can, say, remap a classifier head
        when classes were added. Whatever still does not fit is a named error.
        """
        return state_dict

    def configure_model(self) -> None:
        """Lay the network out over the devices when the plan runs in Lightning's ``ModelParallelStrategy``.

        With a tensor-parallel degree above 1, ``tensor_parallel_plan`` splits the layers over the mesh's
        ``tensor_parallel`` dimension (``torch.distributed.tensor.parallel.parallelize_module``). With more than one
        pipeline rank, ``pipeline_stages`` cuts the network into stages and each rank keeps its own
        (``twinkle_core.pipelining``). With more than one data-parallel replica, FSDP2 then shards what each
        replica holds over the ``data_parallel`` dimension: each child module of ``model`` that holds parameters is
        one shard unit (its parameters are gathered for its forward and freed after), then the whole network;
        override ``shard_units`` to choose the units. Under any other strategy nothing happens.

        Raises:
            TwinkleError: the plan asks for tensor parallel and the algorithm supplies no plan, or for pipeline
                stages the network cannot be cut into.
        """
        from lightning.pytorch.strategies import ModelParallelStrategy

        from twinkle_core.pipelining import Pipeline, pipeline_ranks

        trainer = self._trainer
        if self.model is None or trainer is None or not isinstance(trainer.strategy, ModelParallelStrategy):
            return
        from torch.distributed.fsdp import fully_shard

        tensor, data = self.device_mesh["tensor_parallel"], self.device_mesh["data_parallel"]
        if tensor.size() > 1:
            from torch.distributed.tensor.parallel import parallelize_module

            plan = self.tensor_parallel_plan(tensor)
            if not plan:
                raise TwinkleError(f"{type(self).__name__} supplies no tensor-parallel plan (tensor_parallel_plan); "
                                   "drop tensor_parallel_size or implement it")
            tied = tied_names(self.model)
            parallelize_module(self.model, tensor, plan)
            _tie_again(self.model, tied)

        def shard(parts: list[nn.Module]) -> None:  # FSDP2 over the replicas, unit by unit, then the whole
            if data.size() == 1:
                return
            kept = {id(p) for part in parts for p in part.parameters()}
            units = [u for u in self.shard_units() if any(id(p) in kept for p in u.parameters())]
            for group in _sharing_parameters(units):  # tied weights: their modules shard as one unit
                fully_shard(group if len(group) > 1 else group[0], mesh=data)
            for part in parts:
                fully_shard(part, mesh=data)

        if pipeline_ranks(self.device_mesh) > 1:
            self._pipeline = Pipeline(self, self.device_mesh, wrap=shard)
        elif data.size() > 1:
            shard([self.model])

    @property
    def pipeline(self) -> Any:
        """This rank's pipeline stages and their schedule (a ``twinkle_core.pipelining.Pipeline``) when the run
        is pipelined, else ``None``."""
        return self._pipeline

    def pipeline_batch(self, batch: Any) -> tuple[tuple[torch.Tensor, ...], torch.Tensor,
                                                  Callable[[Any, torch.Tensor], torch.Tensor]]:
        """How a pipelined run trains on ``batch``: the first stage's inputs, the targets the last stage's
        output is scored against, and the loss of one micro-batch's ``(output, targets)`` — whose values over
        the batch's micro-batches must sum to ``batch_loss(batch)``.

        Default: ``(x,)``, ``y`` and ``compute_loss`` weighted by the micro-batch's share of the samples.
        """
        x, y, *_ = batch
        size = len(y)
        return (x,), y, lambda out, target: self.compute_loss(out, target) * (len(target) / size)

    def tensor_parallel_plan(self, mesh: Any) -> dict[str, Any] | None:
        """How the network splits over a tensor-parallel ``mesh`` (a 1-D ``DeviceMesh``): a plan for
        ``torch.distributed.tensor.parallel.parallelize_module`` — module names (relative to ``model``, ``*``
        wildcards allowed) mapped to their ``ParallelStyle`` (``ColwiseParallel``, ``RowwiseParallel``,
        ``SequenceParallel``, ``PrepareModuleInput``), as torchtitan plans Llama. Default ``None``: the algorithm
        does not split, and the planner gives it no tensor factor (and says so).

        Raise ``TwinkleError`` naming the size that does not divide (attention heads, say) when the network
        cannot split ``mesh.size()`` ways.

        The planner also calls it before any process group exists, with a stand-in mesh of size 1 (only
        ``size()`` and ``mesh_dim_names`` are meaningful), to learn which modules' outputs tensor parallel reduces
        (the ``RowwiseParallel`` entries) for its time estimate; a plan that cannot be made then is left out of
        the estimate.
        """
        return None

    @classmethod
    def splits_tensors(cls) -> bool:
        """Whether the algorithm supplies a tensor-parallel plan (overrides ``tensor_parallel_plan``)."""
        return cls.tensor_parallel_plan is not Algorithm.tensor_parallel_plan

    @classmethod
    def cuts_stages(cls) -> bool:
        """Whether the algorithm cuts its network into pipeline stages of its own (overrides ``pipeline_stages``;
        the default cut of an ``nn.Sequential`` runs when a user asks for stages, but the planner does not plan
        them)."""
        return cls.pipeline_stages is not Algorithm.pipeline_stages

    def shard_units(self) -> list[nn.Module]:
        """The modules FSDP2 shards one by one (default: the network's children that hold parameters)."""
        if self.model is None:
            return []
        return [m for m in self.model.children() if any(True for _ in m.parameters())]

    def enable_gradient_checkpointing(self) -> None:
        """Recompute activations during backward to save memory (networks with ``set_grad_checkpointing``).

        Raises:
            TwinkleError: the algorithm's network does not support it.
        """
        setter = getattr(self.model, "set_grad_checkpointing", None)
        if setter is None:
            raise TwinkleError(
                f"{type(self).__name__} does not support gradient checkpointing (its network has no "
                "set_grad_checkpointing); drop gradient_checkpointing=True or lower batch_size"
            )
        setter(True)

    def model_input(self) -> ModelInput | None:
        """What the model wants from its input — its own input size, the smallest side it can use, the
        normalisation its weights expect — for data processors that resize (default: ``None``, nothing).

        Called before any data is read; the engine hands the result to the data processor
        (``DataProcessor.model_input``), which picks the input size from it and the data and explains the
        choice in the run's plan. timm-based algorithms return timm's data config here.
        """
        return None

    def pipeline_stages(self, stages: int) -> list[nn.Module]:
        """The network cut into ``stages`` consecutive parts for pipeline parallel (``pipeline_parallel_size``,
        ``strategy="pipeline"``; see ``twinkle_core.pipelining``).

        Default: an ``nn.Sequential`` network split between its children so that each part holds about the
        same number of parameters. Override it for other networks (the parts must chain: each one's output is
        the next one's input, and they must share the network's parameters).

        Raises:
            TwinkleError: the network is not a sequence of at least ``stages`` children.
        """
        network = self.model
        if not isinstance(network, nn.Sequential) or len(network) < stages:
            raise TwinkleError(
                f"{type(self).__name__}'s network is not an nn.Sequential of {stages}+ layers, so it cannot be cut "
                f"into {stages} pipeline stages; override pipeline_stages(stages) to return its parts in order"
            )
        sizes = [sum(p.numel() for p in child.parameters()) for child in network]
        prefix = [sum(sizes[:i]) for i in range(len(sizes) + 1)]  # parameters before child i
        bounds = [0]
        for k in range(1, stages):  # each cut where the parameters before it come closest to k/stages of them
            target = prefix[-1] * k / stages
            allowed = range(bounds[-1] + 1, len(sizes) - (stages - k) + 1)
            bounds.append(min(allowed, key=lambda i: abs(prefix[i] - target)))
        bounds.append(len(network))
        return [network[bounds[i]:bounds[i + 1]] for i in range(stages)]

    def export_module(self) -> nn.Module:
        """The module exporters trace: the network itself when ``forward`` is the default one."""
        if self.model is not None and type(self).forward is Algorithm.forward:
            return self.model
        return self

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """A random input batch shaped and typed like the data (``DataSpec.input_shape`` and ``input_dtype``),
        for the planner's test forward and FLOP counting: normal floats, or integer ids in
        ``[0, vocab_size)``. Override it when the model takes something else (a dict, several tensors)."""
        spec = self.data_spec
        if spec is None:
            raise TwinkleError(f"{type(self).__name__} has seen no data yet; call configure_data(spec) first")
        dtype = getattr(torch, spec.input_dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise TwinkleError(f"DataSpec.input_dtype {spec.input_dtype!r} is not a torch dtype; use e.g. 'float32' or 'int64'")
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(batch_size, *spec.input_shape, dtype=dtype)
        high = spec.vocab_size or 2
        return torch.randint(0, high, (batch_size, *spec.input_shape), dtype=dtype)

    # -------------------------------------------------------- loss and metrics
    @property
    def min_epochs(self) -> int | None:
        """Epochs to train before early stopping may end the run (default: none; staged training sets it)."""
        return None

    @property
    def min_optimizer_steps(self) -> int | None:
        """The optimizer steps a run of default length trains at least: the planner lengthens the run (more
        epochs) when the data is small (``twinkle_core.planning.TrainingLengthDecider``); ``None``: the planner's
        own rule. An algorithm whose training needs more updates than most (a mapping learnt through adapters)
        says so here."""
        return None

    @property
    def rows_per_sample(self) -> int:
        """How many rows of the network's input one data sample becomes in a training step: 1, or reinforcement
        learning's ``group_size`` completions of a prompt. ``example_input(n)`` then gives ``n`` samples' rows
        (``n × rows_per_sample``, as long as a training step's), and the planner's per-sample figures (FLOPs,
        activation memory) are those rows' together."""
        return 1

    @property
    def updates_per_batch(self) -> int:
        """How many optimizer steps in a row each training batch makes — each optimizer step's micro-batches
        together, seen again that many times (the loader repeats them; an epoch that many times longer): 1 for
        supervised training. Reinforcement learning reuses a rollout for several updates (PPO's epochs, TRL's
        ``num_iterations``: twinkle-llm's ``updates_per_rollout``); above 1 an epoch's last incomplete batch is
        left out (as TRL's ``RepeatSampler`` does), so every repeated batch is a whole optimizer step."""
        return 1

    def agreement_loss(self, batch: Any) -> torch.Tensor | None:
        """What the speed probe compares between precisions (``LOSS_TOLERANCE``), where the training loss itself
        cannot be compared: ``None`` (the default) — the training loss is. A loss that depends on what the step
        samples cannot: reinforcement learning's completions differ between bf16 and fp32 as soon as one logit rounds
        the other way, and a policy-gradient loss is near zero by construction. Such an algorithm returns a loss of
        ``batch`` that samples nothing (twinkle-llm's: the prompts' own next-token loss); the probe computes it
        before each of its steps, without gradients, under that configuration's autocast, untimed."""
        return None

    def rank_state(self) -> Any:
        """What this process holds beyond the weights and the optimizer that an exact resume needs (a rollout
        buffer being reused), as tensors and plain values; ``None``: nothing. Every rank's is gathered into each
        checkpoint (rank 0 writes it) and handed back to the same rank by ``load_rank_state`` on resume."""
        return None

    def load_rank_state(self, state: Any) -> None:
        """Take back what ``rank_state`` gave when the checkpoint was written (called before the first batch
        after a restore; not called when the checkpoint holds nothing for this rank)."""

    def plan_decisions(self, plan: Plan) -> list[Decision]:
        """Choices of this algorithm the plan should explain, given the plan (its micro-batch, steps): each a
        ``twinkle_core.planning.Decision`` with its reason, printed with the plan and stored in ``plan.json``.
        Default: none. (twinkle-llm's reinforcement learning explains its rollouts: how many completions a step
        samples and scores, and how many updates each rollout batch makes.)"""
        return []

    @property
    def task_info(self) -> Task:
        """The registered ``Task`` of ``task`` (its kind and monitored metric)."""
        if self._task_info.name != self.task:  # a subclass changed its task after __init__
            self._task_info = get_task(self.task)
        return self._task_info

    @property
    def monitor(self) -> tuple[str, Literal["min", "max"]]:
        """The validation metric that picks the best checkpoint, and whether higher is better (the task's)."""
        info = self.task_info
        return info.monitor, "max" if info.mode == "max" else "min"

    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy for classification tasks, mean squared error for regression tasks."""
        kind = self.task_info.kind
        if kind == "classification":
            return F.cross_entropy(outputs, targets)
        if kind == "regression":
            return F.mse_loss(outputs.reshape(targets.shape), targets)
        raise TwinkleError(f"{type(self).__name__} must implement compute_loss for {kind} task {self.task}")

    def compute_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Accuracy for classification tasks; MAE for regression (logged with a ``val_`` prefix)."""
        kind = self.task_info.kind
        if kind == "classification":
            return {"accuracy": (outputs.argmax(dim=-1) == targets).float().mean()}
        if kind == "regression":
            return {"mae": (outputs.reshape(targets.shape) - targets).abs().mean()}
        return {}

    @property
    def evaluation_needs_outputs(self) -> bool:
        """Whether ``evaluation_report`` reads the model's outputs for every test sample (``evaluate`` then runs a
        predict pass after the test pass). An algorithm whose report needs only its test figures — a language
        model's perplexity — returns False, so no ``N × length × vocab`` logits are gathered."""
        return True

    def evaluation_report(self, outputs: torch.Tensor, targets: torch.Tensor, spec: DataSpec) -> EvaluationReport:
        """What ``evaluate`` reports for a test set, from the model's ``predict_step`` outputs and the targets
        (all samples, in order): for classification, accuracy, per-class precision/recall/F1 and the confusion
        matrix (JSON and PNG); for regression, MAE, RMSE and R². An algorithm of another task kind overrides it
        and returns its own ``twinkle_core.EvaluationReport``.

        Raises:
            TwinkleError: the task kind has no report here (the algorithm must override this).
        """
        from twinkle_core.metrics import classification_report, regression_report

        kind = self.task_info.kind
        if kind == "classification":
            return classification_report(outputs, targets, spec.class_names or
                                         [str(i) for i in range(int(spec.num_classes or outputs.shape[-1]))])
        if kind == "regression":
            return regression_report(outputs, targets)
        raise TwinkleError(f"{type(self).__name__} ({kind} task '{self.task}') has no evaluation report: override "
                           "Algorithm.evaluation_report(outputs, targets, spec) to return a twinkle_core.EvaluationReport")

    def prediction_rows(self, outputs: torch.Tensor, spec: DataSpec) -> list[dict[str, Any]]:
        """What ``predict`` writes for a batch of ``predict_step`` outputs: one JSON-ready row per sample, or a list
        of rows for a sample that gives several (a forecast's future bars); the engine adds the sample's ``id``.
        For classification, the predicted ``class``, its ``probability`` and ``p_<class>`` for every class; for
        regression, the ``prediction``. An algorithm of another task kind overrides it: a detector's row holds the
        image's ``width``, ``height`` and ``boxes`` (``{"class", "score", "box": [x1, y1, x2, y2]}`` in the
        image's pixels — the shape ``.json`` output and ``draw`` read); a value may be a
        ``twinkle_core.PredictionFile`` (a WAV), which the engine writes beside the output.

        Raises:
            TwinkleError: the task kind has no rows here (the algorithm must override this).
        """
        from twinkle_core.predictions import classification_rows, regression_rows

        kind = self.task_info.kind
        if kind == "classification":
            return classification_rows(outputs.float().numpy(), spec.class_names)
        if kind == "regression":
            return regression_rows(outputs.float().numpy())
        raise TwinkleError(f"{type(self).__name__} ({kind} task '{self.task}') has no prediction rows: override "
                           "Algorithm.prediction_rows(outputs, spec)")

    def export_prediction_rows(self, outputs: torch.Tensor, batch: Any) -> list[dict[str, Any]]:
        """The prediction rows of an exported model's raw ``outputs`` for ``batch`` (what the data processor read,
        ``export_inputs`` gave the graph): what ``twinkle predict model.onnx`` writes for tasks whose outputs need
        the algorithm's decoding (a detector's NMS and letterbox). Called on an instance built from the export's
        card (its hyperparameters and data spec; no weights). Default: classifiers' and regressors' outputs
        read as ``prediction_rows`` reads them; an algorithm of another task kind overrides it.

        Raises:
            TwinkleError: the task's raw outputs cannot be read without the network (speech needs the vocoder,
                text the sampling loop): its exports are predicted from the run.
        """
        kind = self.task_info.kind
        if kind in ("classification", "regression"):
            return self.prediction_rows(outputs, self.data_spec)
        raise TwinkleError(f"{type(self).__name__} ({kind}) cannot read its exported model's raw outputs alone; "
                           "predict from the run (twinkle predict RUN --data ...)")

    def export_decoding(self) -> dict[str, Any] | None:
        """How an export's raw output becomes prediction rows without this algorithm's code, for the inference
        card (``output["decoding"]``): a JSON-ready description that ``twinkle predict model.onnx`` follows in
        NumPy, so that a detector's exports predict with core and onnxruntime alone. ``{"kind": "boxes",
        "confidence", "iou", "max_det", "max_nms", "class_offset"}`` is the one core runs (see
        ``twinkle_core.inference.detection``). Default ``None``: the outputs need no decoding (classifiers,
        regressors) or only this algorithm's ``export_prediction_rows`` reads them."""
        return None

    # ---------------------------------------------------------------- logging
    def _reduced(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` for Lightning's logging, reduced across ranks unless the caller chose otherwise."""
        if "sync_dist" not in kwargs:
            trainer = self._trainer
            kwargs["sync_dist"] = trainer is not None and trainer.world_size > 1
        if kwargs["sync_dist"] and isinstance(kwargs.get("batch_size"), int):
            # Lightning averages the summed batch sizes over ranks in the integer's dtype, truncating
            # (57 + 56) / 2 to 56 when the last validation rows are uneven; a float count stays exact
            kwargs["batch_size"] = float(kwargs["batch_size"])
        return kwargs

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``, reduced across ranks by default (``sync_dist=True`` when the job has several
        processes; pass ``False`` to keep a rank's own value): one run's metrics are the job's, not rank 0's."""
        super().log(name, value, *args, **self._reduced(kwargs))

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log_dict``, reduced across ranks by default (see ``log``)."""
        super().log_dict(dictionary, *args, **self._reduced(kwargs))

    # ---------------------------------------------------------------- the steps
    def eval_batch_size(self, micro_batch_size: int) -> int:
        """The validation batch size (default: at least 256; validation keeps no activations)."""
        return max(micro_batch_size, 256)

    def batch_loss(self, batch: Any) -> torch.Tensor:
        """The training loss of one batch: ``(inputs, targets)``, or ``(inputs, targets, extras...)`` where a
        processor hands out more per sample (timestamps, masks) for the algorithms that read them."""
        x, y, *_ = batch
        return self.compute_loss(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Forward, loss, and log ``train_loss``; pipelined, the schedule runs forward and backward of the batch
        here (``pipeline_batch``) and the loss comes back from the last stage."""
        if self._pipeline is not None:  # each micro-batch's loss scaled as Lightning scales an accumulated one
            inputs, target, loss_of = self.pipeline_batch(batch)
            share = 1.0 / max(int(self.trainer.accumulate_grad_batches), 1)
            loss = self._pipeline.train_step(inputs, target, lambda out, y: loss_of(out, y) * share) / share
        else:
            loss = self.batch_loss(batch)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch_size_of(batch))
        return loss

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Lightning's backward; nothing when pipelined (the schedule ran it within the training step)."""
        if self._pipeline is None:
            super().backward(loss, *args, **kwargs)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Lightning's zeroing before the backward; pipelined, nothing here — the schedule's backward already ran
        in the training step, so the gradients are zeroed after each optimizer step instead (``optimizer_step``)."""
        if self._pipeline is None:
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Lightning's step (the closure runs the training step); pipelined, then the gradients are zeroed."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        if self._pipeline is not None:
            optimizer.zero_grad(set_to_none=True)

    def export_inputs(self, batch: Any) -> torch.Tensor:
        """The model inputs of a validation batch, as an exported model receives them."""
        return batch[0]

    def export_metrics(self, outputs: torch.Tensor, batch: Any) -> dict[str, torch.Tensor]:
        """Metrics of (exported or PyTorch) ``outputs`` on a validation batch, to compare the two."""
        return self.compute_metrics(outputs, batch[1])

    def export_evaluate(self, pairs: Iterable[tuple[Any, torch.Tensor]]) -> dict[str, float]:
        """The task's metrics of a model's outputs over validation batches (``(batch, outputs)`` pairs), the
        first one being the metric exports report.

        Default: each ``export_metrics`` value averaged over the samples. Override it for a metric that is
        not a mean over batches (detectors compute mAP over all images at once).
        """
        sums: dict[str, float] = {}
        count = 0
        for batch, outputs in pairs:
            size = len(self.export_inputs(batch))
            for name, value in self.export_metrics(outputs, batch).items():
                sums[name] = sums.get(name, 0.0) + float(value) * size
            count += size
        return {name: total / count for name, total in sums.items()} if count else {}

    def quantizable_export(self) -> tuple[nn.Module, Callable[[list[torch.Tensor]], torch.Tensor]] | None:
        """For integer accelerators: a module whose outputs quantize well, and the CPU function that turns its
        outputs (a list of tensors) into ``export_module``'s output. Exporters that decode on the CPU (RKNN)
        export the module instead of ``export_module`` — a detector's raw per-scale box and class maps
        survive INT8 where its decoded boxes collapse. Default: ``None`` (the export module as it is).
        """
        return None

    # -------------------------------------------------------------- pruning
    def prunable_network(self) -> tuple[nn.Module, list[nn.Module]]:
        """The network a structured pruner shrinks, and the layers it must keep at their size.

        Default: ``model``, keeping its classifier (timm's ``get_classifier()``, else its last ``Linear``).
        Override it to rewrite modules into an equivalent form the pruner can trace (YOLO splits its C2f
        blocks) or to prune other weights (a moving average). It is also called on a freshly built algorithm
        before a pruned checkpoint's shapes are applied (see ``CheckpointRecord.structure``), so the rewrite
        must be repeatable.
        """
        net = self.model
        if hasattr(net, "get_classifier"):
            head = net.get_classifier()
            if isinstance(head, nn.Module) and any(True for _ in head.parameters()):
                return net, [head]
        linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
        return net, linears[-1:]

    def on_pruned(self, network: nn.Module) -> None:
        """Called after a pruner removed channels of ``prunable_network``'s network: copies of it (a
        moving average) take its new shapes here. Default: nothing."""

    def write_to_run(self, name: str, data: str | bytes) -> str | None:
        """Write ``data`` atomically to ``name`` inside the folder of the run being trained, from global rank
        zero only — for what a model shows of itself while it trains (a language model's generations at each
        validation, say). The folder is the Lightning trainer's ``default_root_dir``, which Twinkle's engine
        sets to the run's folder (any URI).

        Args:
            name: a relative path such as ``generations/step-0000100.jsonl``.
            data: text (written as UTF-8) or bytes.

        Returns:
            Where it was written; ``None`` on the other ranks, or when no trainer is attached.

        Raises:
            TwinkleError: ``name`` is absolute or climbs out of the run's folder.
        """
        from twinkle_core.store.atomic import atomic_write_bytes
        from twinkle_core.uris import join

        parts = name.replace("\\", "/").split("/")
        if name.startswith("/") or ".." in parts or not all(parts):
            raise TwinkleError(f"write_to_run: {name!r} is not a relative path inside the run's folder; "
                               "give one such as 'samples/step-100.jsonl'")
        if self._trainer is None or not self.trainer.is_global_zero:
            return None
        uri = join(str(self.trainer.default_root_dir), *parts)
        atomic_write_bytes(uri, data.encode() if isinstance(data, str) else data)
        return uri

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``val_loss`` and every metric of ``compute_metrics`` as ``val_<name>``."""
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Log ``test_loss`` and ``test_<metric>``."""
        self._evaluate(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """The network's output for a batch of inputs (or ``(inputs, targets)`` pairs)."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x)

    def _evaluate(self, batch: Any, prefix: str) -> None:
        x, y, *_ = batch
        outputs = self(x)
        values = {"loss": self.compute_loss(outputs, y), **self.compute_metrics(outputs, y)}
        self.log_dict({f"{prefix}_{k}": v for k, v in values.items()}, prog_bar=True, batch_size=len(y))

    # ---------------------------------------------------------------- optimizer
    def build_optimizer(self, params: Any) -> torch.optim.Optimizer:
        """The optimizer named by ``optim`` over ``params`` (tensors, or parameter groups with their own lr),
        with torch's fused kernel where it has one (``optimizer_kernel``)."""
        s = self.optim
        params = list(params)
        kernel = self.optimizer_kernel(params)
        if s.optimizer == "sgd":
            return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, nesterov=s.momentum > 0,
                                   weight_decay=s.weight_decay, **kernel)
        if s.optimizer == "adam":
            return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay, **kernel)
        return torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay, **kernel)

    @staticmethod
    def optimizer_kernel(params: Iterable[Any]) -> dict[str, bool]:
        """Keyword arguments for a torch optimizer (SGD, Adam, AdamW) over ``params`` (tensors or parameter groups)
        that choose its fused kernel: ``{"fused": True}`` when every parameter is a plain floating-point tensor on
        the CPU or a CUDA device, else ``{}`` (torch's default: a loop per tensor on the CPU, ``foreach`` on CUDA).

        One pass over each tensor instead of one per operation: on the CPU with one thread, AdamW's step over
        ResNet-18's 11 M parameters takes 17.8 ms fused against 102.8 ms in torch's default loop
        (``bench/optimizer_step.py``). Sharded parameters (DTensor, under FSDP2 or tensor parallelism) keep torch's
        default."""
        from torch.distributed.tensor import DTensor

        tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
        fused = bool(tensors) and all(
            type(t) in (torch.Tensor, nn.Parameter) and not isinstance(t, DTensor) and t.is_floating_point()
            and t.device.type in ("cpu", "cuda") for t in tensors)
        return {"fused": True} if fused else {}

    def optimizer_kernel_name(self) -> str:
        """The kernel ``build_optimizer`` uses for this model's trainable parameters: ``"fused"``, else torch's
        default (``"foreach"`` where a parameter is on CUDA, else ``"for-loop"``)."""
        params = [p for p in self.parameters() if p.requires_grad]
        if self.optimizer_kernel(params).get("fused"):
            return "fused"
        return "foreach" if any(p.device.type == "cuda" for p in params) else "for-loop"

    def configure_optimizers(self) -> Any:
        """The optimizer and schedule named by ``optim`` (see ``OptimizerSettings``)."""
        s = self.optim
        opt = self.build_optimizer([p for p in self.parameters() if p.requires_grad])
        if s.scheduler == "none":
            return opt
        total = max(1, int(self.trainer.estimated_stepping_batches))
        if self.trainer.ckpt_path:
            # Lightning counted the steps by building the training loader now, before a resumed run's checkpoint
            # (and in it the loader's place within the epoch) is restored, and the fit loop would keep that
            # loader: dropped, it is built again after the restore and carries on from the saved place
            self.trainer.fit_loop._combined_loader = None
        if s.scheduler == "onecycle":
            sched: Any = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=s.lr, total_steps=total)
        elif s.scheduler == "cosine":
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
        else:
            sched = torch.optim.lr_scheduler.MultiStepLR(opt, [int(total * 0.6), int(total * 0.85)], gamma=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _tie_again(model: nn.Module, tied: list[list[str]]) -> None:
    """After ``parallelize_module`` gave each name its own sharded parameter: one parameter per tied group again.

    Raises:
        TwinkleError: the plan split tied weights differently.
    """
    for first, *others in tied:
        kept = model.get_parameter(first)
        for name in others:
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner)
            if getattr(getattr(module, leaf), "placements", None) != getattr(kept, "placements", None):
                raise TwinkleError(f"the tensor-parallel plan splits tied weights {first!r} and {name!r} differently; "
                                   "split them the same way (both by rows, say)")
            setattr(module, leaf, kept)


def _sharing_parameters(units: list[nn.Module]) -> list[list[nn.Module]]:
    """``units`` in groups: modules that hold one parameter between them (tied weights) in the same group."""
    groups: list[tuple[set[int], list[nn.Module]]] = []
    for unit in units:
        ids, members = {id(p) for p in unit.parameters()}, [unit]
        for group in [g for g in groups if g[0] & ids]:
            groups.remove(group)
            ids, members = ids | group[0], group[1] + members
        groups.append((ids, members))
    return [members for _, members in groups]

