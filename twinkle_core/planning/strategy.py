"""Resource strategies: (algorithm, data, hardware, history) → ``Plan``.

``DefaultStrategy`` is core's built-in: a sequence of ``deciders``,
one per concern. A plugin registers its own strategy through ``register_resource_strategies``, usually the
default with one decider replaced or adjusted:

```python
class NominalBatch(BatchingDecider):
    def decide(self, draft):
        super().decide(draft)
        draft.decide("accumulate_grad_batches", 4, "accumulate to a nominal batch of 64")

class DetectionStrategy(DefaultStrategy):
    name = "yolo-detection"
    deciders = DefaultStrategy.replacing(batching=NominalBatch())
```
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from twinkle_core.hyperparams import with_new_names

from twinkle_core.planning.deciders import (
    AllocatorDecider,
    BatchingDecider,
    CheckpointIntervalDecider,
    CompileDecider,
    CompressionDecider,
    DataLoadingDecider,
    Decider,
    DevicesDecider,
    DistributionDecider,
    LayoutDecider,
    MemoryFormatDecider,
    OptimizerKernelDecider,
    PlanContext,
    PlanDraft,
    PrecisionDecider,
    PrecisionSwitchingDecider,
    LoaderWorkersDecider,
    TrainingLengthDecider,
    past_overhead,
    planned_length,
    training_seconds,
)
from twinkle_core.planning.plan import ParallelDims, Plan, PlanEstimates

RENAMED_CONCERNS = {"workers": "loader_workers", "strategy": "distribution"}
"""Old names of concerns (old → new) that ``replacing`` still accepts for a release, with a ``DeprecationWarning``."""


class ResourceStrategy(ABC):
    """Base class of resource strategies."""

    name = "strategy"

    @abstractmethod
    def plan(self, context: PlanContext) -> Plan:
        """Choose devices, precision, distribution, batch and data loading for ``context``."""


class DefaultStrategy(ResourceStrategy):
    """Core's rules, one decider per concern, each decision explained (see
    ``twinkle_core.planning.deciders``); a finished run of the same algorithm, data and hardware supplies
    measured step time and the micro-batch that fitted."""

    name = "default"
    deciders: ClassVar[tuple[Decider, ...]] = (
        DevicesDecider(),
        PrecisionDecider(),
        MemoryFormatDecider(),
        AllocatorDecider(),
        DistributionDecider(),
        CompressionDecider(),
        BatchingDecider(),
        LayoutDecider(),
        TrainingLengthDecider(),
        DataLoadingDecider(),
        LoaderWorkersDecider(),
        OptimizerKernelDecider(),
        CompileDecider(),
        PrecisionSwitchingDecider(),
        CheckpointIntervalDecider(),
    )
    """The deciders, in the order they run; each sees the decisions of those before it."""

    @classmethod
    def replacing(cls, **by_concern: Decider) -> tuple[Decider, ...]:
        """This strategy's deciders with those of the named concerns replaced (``batching=MyBatching()``).

        Raises:
            KeyError: a concern no decider has; the message lists the concerns.
        """
        by_concern = with_new_names(by_concern, RENAMED_CONCERNS, f"{cls.__name__}.replacing")
        concerns = {d.concern for d in cls.deciders}
        unknown = sorted(set(by_concern) - concerns)
        if unknown:
            raise KeyError(f"no decider for {', '.join(unknown)}; the concerns are {', '.join(sorted(concerns))}")
        return tuple(by_concern.get(d.concern, d) for d in cls.deciders)

    def plan(self, context: PlanContext) -> Plan:
        """Run every decider on ``context`` and assemble the plan with its estimates."""
        draft = PlanDraft(context)
        for decider in self.deciders:
            decider.decide(draft)
        v = draft.values
        chosen = draft.layout
        dims = ParallelDims(draft.world_size // chosen.model_parallel, chosen.tensor, chosen.pipeline) \
            if chosen is not None else ParallelDims(draft.world_size)
        workers = dims.data  # replicas: each reads its own batches
        micro, accumulate = int(v["micro_batch_size"]), int(v["accumulate_grad_batches"])
        decided = v.get("max_epochs", context.max_epochs)  # None: a strategy without TrainingLengthDecider
        steps_per_epoch, epochs, steps = planned_length(draft)
        estimates: PlanEstimates = {
            "hardware": context.hardware.key,
            **context.facts.to_dict(),  # type: ignore[typeddict-item]  (ModelFacts' fields, as PlanEstimates names them)
            "data_bytes": context.data_bytes,
            "train_samples": context.train_samples,
            "optimizer_steps_per_epoch": steps_per_epoch,
            "optimizer_steps": steps,
        }
        seconds, source = training_seconds(draft)
        overhead = past_overhead(context)
        if overhead is not None and overhead[0] > 0:  # the fixed costs the last run of the kind measured
            seconds += overhead[0]
            estimates["estimated_overhead_seconds"] = float(f"{overhead[0]:.3g}")
            estimates["overhead_run"] = overhead[1]
        probe = context.probe
        if probe is not None and probe.reused is None and probe.seconds > 0:  # spent on this fit before planning
            seconds += probe.seconds
            estimates["estimated_probe_seconds"] = round(probe.seconds, 3)  # as the probe's own figure is kept
        estimates["estimated_seconds"] = float(f"{seconds:.3g}")
        estimates["estimate_source"] = source
        if context.probe is not None:
            estimates["probe"] = context.probe.to_dict()
        if draft.layout is not None:
            estimates["layout"] = draft.layout.to_dict()
        return Plan(
            accelerator=str(v["accelerator"]),
            devices=int(v["devices"]),
            num_nodes=int(v["num_nodes"]),
            precision=str(v["precision"]),
            memory_format=str(v.get("memory_format", "contiguous")),
            allocator=str(v.get("allocator", "default")),
            compile=str(v.get("compile", "off")),
            precision_switching=str(v.get("precision_switching", "off")),
            checkpoint_every_n_epochs=int(v.get("checkpoint_every_n_epochs", 1)),
            strategy=str(v["strategy"]),
            micro_batch_size=micro,
            accumulate_grad_batches=accumulate,
            effective_batch_size=micro * workers * accumulate,
            layout=dims,
            data_loading=str(v["data_loading"]),
            num_workers=int(v["num_workers"]),
            torch_threads=int(v["torch_threads"]),
            resource_strategy=self.name,
            gradient_compression=str(v.get("gradient_compression", "none")),
            max_epochs=None if decided is None else epochs,
            val_check_interval=v.get("val_check_interval"),
            estimates=estimates,
            decisions=draft.decisions,
            history_run=context.history[0].id if context.history else None,
        )


__all__ = ["DefaultStrategy", "PlanContext", "ResourceStrategy"]
