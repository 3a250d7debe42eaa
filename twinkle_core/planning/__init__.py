"""Resource planning (public API): measure the model and data, look at the hardware and history, choose how
to train. A strategy is a sequence of deciders, one per concern; a plugin replaces or adjusts one of them."""

import warnings
from typing import Any

from twinkle_core.planning.deciders import (
    DEFAULT_EPOCHS,
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
    PlanValues,
    LoaderWorkersDecider,
    PrecisionDecider,
    PrecisionSwitchingDecider,
    TrainingLengthDecider,
)
from twinkle_core.planning.estimate import ModelFacts, PlanningError, measure, measure_example, stored_bytes
from twinkle_core.planning.hardware import Hardware
from twinkle_core.planning.history import PastRun
from twinkle_core.planning.layout import Layout, plan_layout
from twinkle_core.planning.plan import Decision, Distribution, ParallelDims, Plan, PlanEstimates, Precision
from twinkle_core.planning.probes import ProbeRun, SpeedProbe
from twinkle_core.planning.strategy import DefaultStrategy, ResourceStrategy

__all__ = [
    "DEFAULT_EPOCHS",
    "AllocatorDecider",
    "BatchingDecider",
    "CheckpointIntervalDecider",
    "CompileDecider",
    "CompressionDecider",
    "DataLoadingDecider",
    "Decider",
    "Decision",
    "DefaultStrategy",
    "DevicesDecider",
    "Distribution",
    "DistributionDecider",
    "Hardware",
    "Layout",
    "LayoutDecider",
    "MemoryFormatDecider",
    "OptimizerKernelDecider",
    "ModelFacts",
    "ParallelDims",
    "PastRun",
    "Plan",
    "PlanContext",
    "PlanDraft",
    "PlanEstimates",
    "PlanValues",
    "PlanningError",
    "Precision",
    "PrecisionDecider",
    "PrecisionSwitchingDecider",
    "ProbeRun",
    "ResourceStrategy",
    "SpeedProbe",
    "LoaderWorkersDecider",
    "TrainingLengthDecider",
    "measure",
    "measure_example",
    "stored_bytes",
    "plan_layout",
]


def __getattr__(name: str) -> Any:
    """Old names kept for a release: ``WorkersDecider`` is ``LoaderWorkersDecider`` (a ``DeprecationWarning``)."""
    if name == "WorkersDecider":
        warnings.warn("twinkle_core.planning.WorkersDecider is renamed LoaderWorkersDecider", DeprecationWarning, stacklevel=2)
        return LoaderWorkersDecider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
