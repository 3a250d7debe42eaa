"""Memory: the largest micro-batch that fits (found with real steps), and recovery from out-of-memory.

``memory_limit_bytes`` caps the memory a run may use. On a GPU it becomes
``torch.cuda.set_per_process_memory_fraction`` (real allocations fail past it). On a CPU — and in tests —
it is enforced by ``MemoryGuard`` against the planner's estimate of one step (training state plus
activations and their gradients per sample × micro-batch): a step that would exceed it raises
``torch.OutOfMemoryError`` exactly as a GPU would.
"""

from __future__ import annotations

import itertools
from typing import Any

import lightning as L
import torch
from torch.utils.data import IterableDataset

from twinkle_core.planning.estimate import ModelFacts


def facts_of(plan: Any) -> ModelFacts:
    """The model measurements a plan carries in its estimates."""
    return ModelFacts(**{k: int(plan.estimates[k]) for k in ModelFacts.__dataclass_fields__})


def step_bytes(facts: ModelFacts, micro_batch: int) -> int:
    """Estimated memory of one training step at ``micro_batch``."""
    return facts.state_bytes + micro_batch * facts.activation_bytes_per_sample * 2


class MemoryGuard(L.Callback):
    """Raises ``torch.OutOfMemoryError`` before a step whose estimated memory exceeds the limit."""

    def __init__(self, facts: ModelFacts, limit_bytes: int) -> None:
        """Guard steps of a model with ``facts`` against ``limit_bytes``."""
        self.facts, self.limit_bytes = facts, int(limit_bytes)

    def check(self, micro_batch: int) -> None:
        """Raise ``torch.OutOfMemoryError`` if ``micro_batch`` samples would not fit."""
        need = step_bytes(self.facts, micro_batch)
        if need > self.limit_bytes:
            raise torch.OutOfMemoryError(
                f"out of memory: a step of {micro_batch} samples needs ~{need} bytes, the limit is {self.limit_bytes}"
            )

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        """Check the batch about to run."""
        from twinkle_core.algorithm import batch_size_of

        self.check(batch_size_of(batch))


def apply_gpu_limit(limit_bytes: int | None) -> None:
    """Cap this process's CUDA memory at ``limit_bytes`` (no-op without CUDA or a limit)."""
    if limit_bytes and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total))


def find_micro_batch(
    algorithm: Any, dataset: Any, start: int, guard: MemoryGuard | None, collate_fn: Any = None
) -> tuple[int, list[dict[str, Any]]]:
    """The largest of ``start``, ``start/2``, ... ``1`` for which a real forward and backward pass runs.

    Each try runs one training step's forward and backward on real samples (gradients are discarded,
    weights untouched). Returns the micro-batch and the tries (size, ok, error).
    """
    tries: list[dict[str, Any]] = []
    device = next(algorithm.parameters()).device
    size = max(int(start), 1)
    was_training = algorithm.training
    algorithm.train()
    try:
        while True:
            size = min(size, len(dataset))
            try:
                if guard is not None:
                    guard.check(size)
                from lightning.fabric.utilities.apply_func import move_data_to_device
                from torch.utils.data import default_collate

                if isinstance(dataset, IterableDataset):  # streamed: the first samples it yields
                    samples = list(itertools.islice(iter(dataset), size))
                else:
                    samples = [dataset[i] for i in range(size)]
                batch = (collate_fn or default_collate)(samples)
                algorithm.batch_loss(move_data_to_device(batch, device)).backward()
                tries.append({"micro_batch_size": size, "ok": True})
                return size, tries
            except torch.OutOfMemoryError as err:
                tries.append({"micro_batch_size": size, "ok": False, "error": str(err).splitlines()[0][:200]})
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                if size == 1:
                    raise
                size //= 2
            finally:
                algorithm.zero_grad(set_to_none=True)
    finally:
        algorithm.train(was_training)


def scale_batch(plan: Any, algorithm: Any, dataset: Any, limit_bytes: int | None, collate_fn: Any = None) -> None:
    """Set the plan's micro-batch to the largest that runs a real step, keeping its effective batch."""
    import math

    from twinkle_core.planning.plan import Decision

    workers = plan.devices * plan.num_nodes
    start = max(1, plan.effective_batch_size // workers)
    guard = MemoryGuard(facts_of(plan), limit_bytes) if limit_bytes and plan.accelerator == "cpu" else None
    if plan.accelerator == "cuda":
        apply_gpu_limit(limit_bytes)
        algorithm.cuda()
    try:
        micro, tries = find_micro_batch(algorithm, dataset, start, guard, collate_fn)
    finally:
        algorithm.cpu()
    accumulate = max(1, math.ceil(plan.effective_batch_size / (micro * workers)))
    tried = ", ".join(f"{t['micro_batch_size']}{'' if t['ok'] else ' (out of memory)'}" for t in tries)
    plan.micro_batch_size, plan.accumulate_grad_batches = micro, accumulate
    plan.effective_batch_size = micro * workers * accumulate
    reasons = {
        "micro_batch_size": (micro, f"auto_batch_scaling: largest that ran a real step (tried {tried})"),
        "accumulate_grad_batches": (accumulate, f"{micro} × {workers} device(s) × {accumulate} keeps the effective "
                                                f"batch {plan.effective_batch_size}"),
    }
    plan.decisions = [Decision(d.name, *reasons[d.name]) if d.name in reasons else d for d in plan.decisions]
