"""Gradient compression for DDP: torch's communication hooks, wrapped so each rank counts what it all-reduces.

``gradient_compression`` (a trainer setting; the planner turns PowerSGD on for multi-node DDP):

* ``"none"`` — torch's plain all-reduce of the gradient buckets (fp32);
* ``"fp16"`` / ``"bf16"`` — buckets cast to 16 bits for the all-reduce, then back (half the bytes);
* ``"powersgd"`` — PowerSGD (Vogels et al., 2019): each gradient matrix is all-reduced as two rank-``r``
  factors, with error feedback; the first ``start_iter`` steps all-reduce in full (warm-up).

The article's "1-bit Adam" was removed from DeepSpeed (0.19.8 has no ``OnebitAdam``): asking for it is a
named error pointing at these. The bytes a rank sends per optimizer step are counted in the hook
(``CountingState``) and recorded with the run (``measured.allreduce_bytes_per_step``).
"""

# no `from __future__ import annotations` here: torch checks the hook's annotations as real objects

from typing import Any, Optional

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel

COMPRESSIONS = ("none", "powersgd", "bf16", "fp16")
POWERSGD_RANK = 2
"""The rank of PowerSGD's factors: 1–4 keeps accuracy on most models (the paper's experiments)."""
POWERSGD_START_ITER = 10
"""Steps of plain all-reduce before PowerSGD starts compressing."""
MIN_COMPRESSION_RATE = 2.0
"""PowerSGD compresses a matrix only when that divides its bytes at least by this much (torch's default)."""


class CountingState:
    """A communication hook's state plus the bytes it all-reduced and the optimizer steps it served."""

    def __init__(self, kind: str, inner: Any) -> None:
        """Count for compression ``kind`` around the hook state ``inner``."""
        self.kind, self.inner = kind, inner
        self.bytes, self.steps = 0, 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore after pickling (DDP may copy hook states)."""
        self.__dict__.update(state)

    @property
    def bytes_per_step(self) -> Optional[float]:
        """Mean bytes all-reduced per optimizer step by this rank."""
        return self.bytes / self.steps if self.steps else None


def _bucket_bytes(state: CountingState, bucket: dist.GradBucket) -> int:
    """What the wrapped hook sends for ``bucket``."""
    buffer = bucket.buffer()
    if state.kind in ("fp16", "bf16"):
        return buffer.numel() * 2
    if state.kind != "powersgd" or state.inner.iter < state.inner.start_powerSGD_iter:
        return buffer.numel() * buffer.element_size()
    rank, sent = state.inner.matrix_approximation_rank, 0
    for grad in bucket.gradients():
        if grad.ndimension() > 1:
            rows, cols = grad.shape[0], grad.numel() // grad.shape[0]
            compressed = (rows + cols) * min(rank, rows, cols)
            if compressed * MIN_COMPRESSION_RATE < rows * cols:
                sent += compressed * grad.element_size()
                continue
        sent += grad.numel() * grad.element_size()
    return sent


def counted_hook(state: CountingState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Count the bucket's bytes, then run the compression's own hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    state.bytes += _bucket_bytes(state, bucket)
    if bucket.is_last():
        state.steps += 1
    if state.kind == "powersgd":
        return powersgd.powerSGD_hook(state.inner, bucket)
    hook = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
            "bf16": default_hooks.bf16_compress_hook}[state.kind]
    return hook(state.inner, bucket)


class CountingDDPStrategy(DDPStrategy):
    """Lightning's DDP strategy registering its communication hook on any backend.

    Lightning registers hooks on CUDA only (a torch 1.8 limit); torch's DDP takes them on gloo too, so the hook
    goes on the wrapped model directly.
    """

    def _register_ddp_hooks(self) -> None:
        if isinstance(self.model, DistributedDataParallel):
            self.model.register_comm_hook(self._ddp_comm_state, self._ddp_comm_hook)


def ddp_strategy(kind: str) -> Any:
    """Lightning's DDP strategy with the counting hook for ``kind`` registered (on CPU/gloo too)."""
    if kind == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        inner: Any = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=POWERSGD_RANK,
                                            start_powerSGD_iter=POWERSGD_START_ITER,
                                            min_compression_rate=MIN_COMPRESSION_RATE)
    else:
        inner = None  # the default process group
    return CountingDDPStrategy(ddp_comm_state=CountingState(kind, inner), ddp_comm_hook=counted_hook)


def measured_bytes(strategy: Any) -> dict[str, Any]:
    """``allreduce_bytes_per_step`` and the compression of a finished DDP run (empty for other strategies)."""
    state = getattr(strategy, "_ddp_comm_state", None)
    if not isinstance(state, CountingState) or state.bytes_per_step is None:
        return {}
    return {"gradient_compression": state.kind, "allreduce_bytes_per_step": round(state.bytes_per_step, 1)}
