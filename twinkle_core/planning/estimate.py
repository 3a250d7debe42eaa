"""Model measurements for planning: parameters, FLOPs per sample and activation memory."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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
        state_bytes: weights, gradients and AdamW's two moments in fp32 (16 bytes per trainable parameter
            plus 4 per frozen one).
    """

    parameters: int
    trainable: int
    flops_per_sample: int
    activation_bytes_per_sample: int
    state_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


def measure(model: nn.Module, example: Any) -> ModelFacts:
    """Measure ``model`` on ``example`` (a batch of 2) — one forward and backward pass on CPU.

    The model's training mode and gradients are restored afterwards.
    """
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batch = _batch_size(example)
    activations = 0

    def count(_module: nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal activations
        activations += sum(t.numel() * 4 for t in _tensors(output))

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    model.train()
    try:
        with FlopCounterMode(display=False) as counter:
            out = model(example)
            loss = sum(t.float().sum() for t in _tensors(out))
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
        state_bytes=16 * trainable + 4 * (parameters - trainable),
    )


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
    try:
        return measure(model, example)
    except Exception as err:
        raise PlanningError(
            f"the planner's test forward of {name} failed on example_input(2) — {_describe(example)}: "
            f"{type(err).__name__}: {err}. Override {name}.example_input(batch_size) to return what the model "
            "takes (for token ids give the DataSpec input_dtype='int64' and vocab_size=N)"
        ) from err


def _describe(example: Any) -> str:
    tensors = _tensors(example)
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}" for t in tensors) or repr(example)[:80]


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor inside ``value`` (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _batch_size(example: Any) -> int:
    if isinstance(example, torch.Tensor):
        return int(example.shape[0]) if example.dim() else 1
    if isinstance(example, (tuple, list)) and example:
        return _batch_size(example[0])
    if isinstance(example, dict) and example:
        return _batch_size(next(iter(example.values())))
    return 1
