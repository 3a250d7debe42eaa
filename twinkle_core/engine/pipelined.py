"""Lightning's ``ModelParallelStrategy`` with a pipeline dimension: a ``data × pipeline × tensor`` device mesh, and
whole checkpoints gathered from the stages (``twinkle_core.pipelining``).

Lightning's strategy builds a ``data × tensor`` mesh and gathers a full checkpoint with torch's
``get_model_state_dict``, which covers the tensors of one module; under pipeline parallel no rank holds the whole
module, so this strategy asks the algorithm's ``Pipeline`` to gather every stage's share on rank 0 — the same
file a one-process run writes, which any layout loads — and loads such a file back, each rank taking its share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from twinkle_core.errors import TwinkleError
from twinkle_core.pipelining import PIPELINE_DIMENSION


class PipelineParallelStrategy(ModelParallelStrategy):
    """``ModelParallelStrategy`` over a ``(data_parallel, pipeline_parallel, tensor_parallel)`` mesh."""

    def __init__(self, data_parallel_size: int, pipeline_parallel_size: int, tensor_parallel_size: int) -> None:
        """Lay ``data × pipeline × tensor`` processes out (tensor parallel innermost: neighbouring ranks)."""
        super().__init__(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size,
                         save_distributed_checkpoint=False)
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

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The whole network's weights on rank 0 (every stage's share), empty elsewhere."""
        return self._pipeline().full_state_dict()

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """The whole optimizer state on rank 0, keyed as a one-process run keys it; empty elsewhere."""
        inner = getattr(optimizer, "_optimizer", optimizer)  # LightningOptimizer
        return self._pipeline().full_optimizer_state(inner)

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Load a whole checkpoint file (any layout's): each rank takes its stages' weights and optimizer state."""
        path = Path(self.broadcast(str(checkpoint_path)))
        if path.is_dir():
            raise TwinkleError(f"{path} is a sharded checkpoint folder; a pipelined run loads a whole checkpoint file")
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
