"""The Lightning strategy that carries out a plan's distribution, built in one place (as Lightning's
``StrategyRegistry`` maps names to classes): a builder per ``Distribution`` that needs a configured object, the
distribution's own name for the rest (``"auto"``, DeepSpeed's stages), and a layout with pipeline stages in
Twinkle's ``PipelineParallelStrategy`` whatever the distribution says. Planning names the distribution and the
``ParallelDims``; only the engine imports Lightning's strategies.
"""

from __future__ import annotations

from typing import Any, Callable

from twinkle_core.engine.compression import ddp_strategy
from twinkle_core.engine.pipelined import PipelineParallelStrategy
from twinkle_core.engine.sharded import ShardedModelParallelStrategy
from twinkle_core.planning import Distribution, Plan
from twinkle_core.processes import inside_ray_worker


def _ddp(plan: Plan, sharded: bool) -> tuple[Any, list[Any]]:
    """DDP through a hook that counts the bytes it all-reduces (and compresses them); inside Ray Train's workers,
    Ray's DDP strategy and cluster environment."""
    if inside_ray_worker():
        from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment

        return RayDDPStrategy(), [RayLightningEnvironment()]
    return ddp_strategy(plan.gradient_compression), []


def _fsdp2(plan: Plan, sharded: bool) -> tuple[Any, list[Any]]:
    """FSDP2 over the data-parallel replicas × tensor parallel (Lightning's ``ModelParallelStrategy``), its
    checkpoints sharded where the run folder is on this machine's disk."""
    return ShardedModelParallelStrategy(plan.layout.data, plan.layout.tensor, sharded=sharded), []


BUILDERS: dict[Distribution, Callable[[Plan, bool], tuple[Any, list[Any]]]] = {
    Distribution.DDP: _ddp,
    Distribution.FSDP2: _fsdp2,
}
"""The distributions whose Lightning strategy is a configured object, and how each is built."""


def lightning_strategy(plan: Plan, sharded: bool) -> tuple[Any, list[Any]]:
    """``plan``'s Lightning strategy (an object, or a name Lightning knows) and the plugins it needs beside it.

    Args:
        plan: the plan (its ``strategy`` and ``layout``).
        sharded: whether checkpoints may be written as distributed-checkpoint folders (the run folder is on this
            machine's disk); elsewhere each is one whole file.
    """
    if plan.layout.pipeline_enabled:  # data × pipeline × tensor; the stages clip together (PipelineGradients)
        dims = plan.layout
        return PipelineParallelStrategy(dims.data, dims.pipeline, dims.tensor, sharded=sharded), []
    builder = BUILDERS.get(plan.strategy)
    return builder(plan, sharded) if builder is not None else (str(plan.strategy), [])


__all__ = ["BUILDERS", "lightning_strategy"]
