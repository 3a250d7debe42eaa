"""Lightning's ``ModelParallelStrategy`` with a pipeline dimension: a ``data × pipeline × tensor`` device mesh whose
checkpoints are sharded folders (``engine.sharded``) or whole files.

Under pipeline parallel no rank holds the whole module: each holds its stages, under their names in the whole
network (``twinkle_core.pipelining``). A sharded checkpoint takes every rank's shards of its stages — DCP writes
each tensor once, whichever ranks hold it — with the optimizers' parameter groups naming the whole network's
parameters, so any layout (one process, tensor parallel, other stages) reads it. Whole files are gathered on rank
0 by the algorithm's ``Pipeline`` and loaded back by it, each rank taking its share.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from twinkle_core.engine.sharded import ShardedModelParallelStrategy
from twinkle_core.errors import TwinkleError
from twinkle_core.pipelining import PIPELINE_DIMENSION


class PipelineParallelStrategy(ShardedModelParallelStrategy):
    """``ModelParallelStrategy`` over a ``(data_parallel, pipeline_parallel, tensor_parallel)`` mesh."""

    def __init__(self, data_parallel_size: int, pipeline_parallel_size: int, tensor_parallel_size: int,
                 sharded: bool = True) -> None:
        """Lay ``data × pipeline × tensor`` processes out (tensor parallel innermost: neighbouring ranks);
        ``sharded=False`` writes whole checkpoint files on rank 0."""
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size,
                         sharded=sharded)
        self.pipeline_parallel_size = pipeline_parallel_size

    def setup_environment(self) -> None:
        """Start the process group and build the three-dimensional mesh ``configure_model`` receives."""
        from torch.distributed.device_mesh import init_device_mesh

        self._setup_distributed()
        shape = (int(self._data_parallel_size), self.pipeline_parallel_size, int(self._tensor_parallel_size))
        if shape[0] * shape[1] * shape[2] != self.world_size:
            raise TwinkleError(f"a data × pipeline × tensor layout of {shape} needs {shape[0] * shape[1] * shape[2]} "
                               f"processes; the job has {self.world_size}")
        self._device_mesh = init_device_mesh(self.root_device.type, shape,
                                             mesh_dim_names=("data_parallel", PIPELINE_DIMENSION, "tensor_parallel"))
        assert self.lightning_module is not None
        self.lightning_module._device_mesh = self._device_mesh

    def _pipeline(self) -> Any:
        pipeline = getattr(self.lightning_module, "pipeline", None)
        if pipeline is None:
            raise TwinkleError(f"{type(self.lightning_module).__name__} was not cut into pipeline stages "
                               "(Algorithm.configure_model did not run)")
        return pipeline

    def local_model_state(self) -> dict[str, Any]:
        """This rank's stages' weights (their shards), under their names in the whole network."""
        assert self.lightning_module is not None
        return {k: v for k, v in self.lightning_module.state_dict().items() if not v.is_meta}

    def load_local_states(self, model: dict[str, Any], optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]]
                          ) -> None:
        """Put this rank's loaded stages back (the other ranks' weights are not in ``model``)."""
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        assert self.lightning_module is not None
        self.lightning_module.load_state_dict(model, strict=False)
        for optimizer, state in optimizers:
            set_optimizer_state_dict(self.lightning_module, optimizer, optim_state_dict=state)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """This rank's shards (sharded), or the whole network's weights on rank 0 (whole files)."""
        return self.local_model_state() if self.sharded else self._pipeline().full_state_dict()

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """This rank's shards with the whole network's parameter groups (sharded), or the whole optimizer state
        on rank 0, keyed as a one-process run keys it (whole files)."""
        inner = getattr(optimizer, "_optimizer", optimizer)  # LightningOptimizer
        if not self.sharded:
            return self._pipeline().full_optimizer_state(inner)
        state = self.local_optimizer_state(inner)
        state["param_groups"] = self._pipeline().named_groups(inner)
        return state

    def load_whole_checkpoint(self, path: str, weights_only: bool | None = None) -> dict[str, Any]:
        """Load a whole checkpoint file (any layout's): each rank takes its stages' weights and optimizer state."""
        checkpoint = torch.load(path, map_location="cpu", weights_only=True if weights_only is None else weights_only)
        pipeline = self._pipeline()
        pipeline.load_state_dict(checkpoint.pop("state_dict"))
        for optimizer, state in zip(self.optimizers, checkpoint.get("optimizer_states", [])):
            pipeline.load_optimizer_state(optimizer, state)
        return checkpoint


class PipelineGradients(L.Callback):
    """A pipelined run's gradients before each optimizer step: the copies of a weight tied across stages summed
    (once per step, after the batches it accumulates), then — with ``max_norm`` — clipped by the norm of every
    stage's gradients together (Lightning's own clipping sees one rank's stages)."""

    def __init__(self, max_norm: float | None = None) -> None:
        """Clip to ``max_norm`` (``None``: no clipping)."""
        self.max_norm = max_norm

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        """Sum the tied copies, then clip."""
        pipeline = getattr(pl_module, "pipeline", None)
        if pipeline is None:
            return
        pipeline.sum_tied_gradients()
        if self.max_norm:
            pipeline.clip_gradients([p for g in optimizer.param_groups for p in g["params"]], self.max_norm)
