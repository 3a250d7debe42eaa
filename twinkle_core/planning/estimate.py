"""Model measurements for planning: parameters, FLOPs per sample and activation memory."""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from twinkle_core.errors import TwinkleError


class PlanningError(TwinkleError):
    """The planner could not measure the model: its test forward on ``example_input`` failed."""


@dataclass(frozen=True)
class ModelFacts:
    """What one training sample costs.

    Attributes:
        parameters: all parameters.
        trainable: parameters with ``requires_grad``.
        flops_per_sample: forward + backward FLOPs for one sample (``torch.utils.flop_counter``).
        activation_bytes_per_sample: bytes of module outputs kept for backward, per sample (fp32).
        state_bytes: weights, gradients and AdamW's two moments in fp32 (16 bytes per trainable parameter)
            plus the bytes the frozen parameters hold (``stored_bytes``: 4 for an fp32 one, about 0.5 for a
            4-bit base's).
        tensor_parallel_bytes_per_sample: fp32 bytes tensor parallel reduces per sample, forward and backward: the
            outputs of the modules its plan splits row-wise, twice (0 without a plan).
        tensor_parallel_collectives: the collectives tensor parallel runs per micro-batch (two per row-wise module
            call, four under sequence parallel).
        boundary_bytes_per_sample: fp32 bytes of one activation between layers per sample (what crosses a
            pipeline stage boundary; the largest row-wise output, 0 when unknown).
        shard_units: the modules FSDP2 shards one by one (``Algorithm.shard_units``; 1 when unknown).
    """

    parameters: int
    trainable: int
    flops_per_sample: int
    activation_bytes_per_sample: int
    state_bytes: int
    tensor_parallel_bytes_per_sample: int = 0
    tensor_parallel_collectives: int = 0
    boundary_bytes_per_sample: int = 0
    shard_units: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


def measure(model: nn.Module, example: Any, row_wise: Iterable[nn.Module] = (), sequence_parallel: bool = False,
            shard_units: int = 1) -> ModelFacts:
    """Measure ``model`` on ``example`` (a batch of 2) — one forward and backward pass on CPU (or the meta device).

    ``row_wise``: the modules a tensor-parallel plan splits row-wise (their outputs are reduced; see
    ``twinkle_core.planning.timing``), ``sequence_parallel``: whether the plan keeps activations split by sequence
    between them, ``shard_units``: the modules FSDP2 shards one by one. The model's training mode and gradients
    are restored afterwards.
    """
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batch = _batch_size(example)
    activations = 0
    reduced: list[int] = []

    def count(_module: nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal activations
        activations += sum(t.numel() * 4 for t in tensors_in(output))

    def count_reduced(_module: nn.Module, _inputs: Any, output: Any) -> None:
        reduced.append(sum(t.numel() * 4 for t in tensors_in(output)))

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    handles += [m.register_forward_hook(count_reduced) for m in row_wise]
    was_training = model.training
    model.train()
    try:
        with FlopCounterMode(display=False) as counter:
            out = model(example)
            loss = sum(t.float().sum() for t in tensors_in(out))
            if loss.requires_grad:
                loss.backward()
        flops = counter.get_total_flops()
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
        model.zero_grad(set_to_none=True)
    return ModelFacts(
        parameters=parameters,
        trainable=trainable,
        flops_per_sample=int(flops // max(batch, 1)),
        activation_bytes_per_sample=int(activations // max(batch, 1)),
        state_bytes=16 * trainable + sum(stored_bytes(p) for p in model.parameters() if not p.requires_grad),
        tensor_parallel_bytes_per_sample=2 * sum(reduced) // max(batch, 1),
        tensor_parallel_collectives=len(reduced) * (4 if sequence_parallel else 2),
        boundary_bytes_per_sample=max(reduced, default=0) // max(batch, 1),
        shard_units=max(shard_units, 1),
    )


def stored_bytes(tensor: torch.Tensor) -> int:
    """The bytes ``tensor`` holds: its elements, or for a tensor subclass wrapping others (a 4-bit weight's codes
    and scales, torch's ``__tensor_flatten__`` protocol) the sum of theirs."""
    data = getattr(tensor, "data", tensor)
    if type(data) not in (torch.Tensor, nn.Parameter) and hasattr(data, "__tensor_flatten__"):
        return sum(stored_bytes(getattr(data, name)) for name in data.__tensor_flatten__()[0])
    return data.numel() * data.element_size()


def measure_example(model: nn.Module) -> ModelFacts:
    """Measure ``model`` (an ``Algorithm``) on its own ``example_input(2)``.

    Raises:
        PlanningError: building the example or the test forward failed; the message names the example's
            type and shape and says how to fix ``example_input``.
    """
    name = type(model).__name__
    try:
        example = model.example_input(2)  # type: ignore[operator]
    except TwinkleError:
        raise
    except Exception as err:
        raise PlanningError(f"{name}.example_input(2) failed ({type(err).__name__}: {err}); "
                            "override example_input(batch_size) to return a batch the model accepts") from err
    row_wise, sequence_parallel = _row_wise(model)
    units = model.shard_units() if callable(getattr(model, "shard_units", None)) else []  # type: ignore[operator]
    rows = max(int(getattr(model, "rows_per_sample", 1) or 1), 1)  # a sample's rows (Algorithm.rows_per_sample)
    try:
        facts = measure(model, example, row_wise, sequence_parallel, len(units) or 1)
    except Exception as err:
        raise PlanningError(
            f"the planner's test forward of {name} failed on example_input(2) — {describe_tensors(example)}: "
            f"{type(err).__name__}: {err}. Override {name}.example_input(batch_size) to return what the model "
            "takes (for token ids give the DataSpec input_dtype='int64' and vocab_size=N)"
        ) from err
    if rows == 1:
        return facts
    return replace(facts, flops_per_sample=facts.flops_per_sample * rows,
                   activation_bytes_per_sample=facts.activation_bytes_per_sample * rows,
                   tensor_parallel_bytes_per_sample=facts.tensor_parallel_bytes_per_sample * rows,
                   boundary_bytes_per_sample=facts.boundary_bytes_per_sample * rows)


class _PlanningMesh:
    """What ``Algorithm.tensor_parallel_plan`` gets at planning time, when no processes exist yet: a mesh of one
    (only its size and names are read), so the plan names its modules without dividing anything."""

    mesh_dim_names = ("tensor_parallel",)
    ndim = 1

    def size(self, dim: int | None = None) -> int:
        """One rank (so no size fails to divide)."""
        return 1


def _row_wise(algorithm: nn.Module) -> tuple[list[nn.Module], bool]:
    """The modules ``algorithm``'s tensor-parallel plan splits row-wise, and whether it is sequence parallel (none
    and ``False`` without a plan, or when the plan cannot be made before the processes exist)."""
    splits = getattr(type(algorithm), "splits_tensors", None)
    network = getattr(algorithm, "model", None)
    if not callable(splits) or not splits() or not isinstance(network, nn.Module):
        return [], False
    from torch.distributed.tensor.parallel import RowwiseParallel, SequenceParallel

    try:
        plan = algorithm.tensor_parallel_plan(_PlanningMesh()) or {}  # type: ignore[operator]
    except Exception:  # a plan that needs the real mesh (or refuses this run): the estimate omits its traffic
        return [], False
    patterns = [name for name, style in plan.items() if isinstance(style, RowwiseParallel)]
    modules = [m for name, m in network.named_modules() if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    return modules, any(isinstance(style, SequenceParallel) for style in plan.values())


def describe_tensors(example: Any) -> str:
    """The tensors inside ``example``, described (``"float32 [32, 3, 32, 32], int64 [32]"``)."""
    tensors = tensors_in(example)
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}" for t in tensors) or repr(example)[:80]


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside ``value`` (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_in(item)]
    return []


def _batch_size(example: Any) -> int:
    if isinstance(example, torch.Tensor):
        return int(example.shape[0]) if example.dim() else 1
    if isinstance(example, (tuple, list)) and example:
        return _batch_size(example[0])
    if isinstance(example, dict) and example:
        return _batch_size(next(iter(example.values())))
    return 1
