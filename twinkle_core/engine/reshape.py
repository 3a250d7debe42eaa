"""``reshape_to_state``: give a freshly built network the channel counts of a structurally pruned one, from
its state dict alone — so a pruned model reloads from its config plus tensors, never from pickled modules.

Structured pruning (torch-pruning) removes whole channels: it shrinks the weights of ``Conv*d``, ``Linear``,
the norms and their buffers, and leaves the graph as it was. Rebuilding the network from its config and
shrinking each of those modules to the saved tensors' shapes gives back the pruned network exactly. A
checkpoint says it needs this with ``structure`` in its Twinkle record (see
``CheckpointRecord``); the engine then reshapes before loading.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from twinkle_core.errors import TwinkleError

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)


def reshape_to_state(module: nn.Module, state_dict: dict[str, Any]) -> list[str]:
    """Shrink (or grow) every convolution, linear layer and norm of ``module`` whose tensors in ``state_dict``
    have other shapes, in place; returns the names of the modules changed. Values are not loaded.

    Raises:
        TwinkleError: a tensor whose shape no module kind here can take (the module and both shapes named).
    """
    changed = []
    for name, child in module.named_modules():
        prefix = f"{name}." if name else ""
        weight = state_dict.get(f"{prefix}weight")
        if weight is None or getattr(child, "weight", None) is None:
            continue
        if tuple(weight.shape) == tuple(child.weight.shape) and not _buffers_differ(child, state_dict, prefix):
            continue
        if isinstance(child, nn.modules.conv._ConvNd):  # noqa: SLF001 — every Conv1d/2d/3d (and transposed)
            _conv(child, weight.shape)
        elif isinstance(child, nn.Linear):
            child.in_features, child.out_features = int(weight.shape[1]), int(weight.shape[0])
        elif isinstance(child, _NORMS):
            _norm(child, tuple(int(d) for d in weight.shape))
        else:
            raise TwinkleError(f"cannot reshape {prefix}weight ({type(child).__name__}) from "
                               f"{tuple(child.weight.shape)} to {tuple(weight.shape)}")
        for key, tensor in child.named_parameters(recurse=False):
            saved = state_dict.get(prefix + key)
            if saved is not None and tuple(saved.shape) != tuple(tensor.shape):
                setattr(child, key, nn.Parameter(torch.empty(saved.shape, dtype=tensor.dtype, device=tensor.device),
                                                 requires_grad=tensor.requires_grad))
        for key, tensor in list(child.named_buffers(recurse=False)):
            saved = state_dict.get(prefix + key)
            if tensor is not None and saved is not None and tuple(saved.shape) != tuple(tensor.shape):
                child.register_buffer(key, torch.zeros(saved.shape, dtype=tensor.dtype, device=tensor.device))
        changed.append(name)
    return changed


def _buffers_differ(child: nn.Module, state_dict: dict[str, Any], prefix: str) -> bool:
    return any(tensor is not None and prefix + key in state_dict
               and tuple(state_dict[prefix + key].shape) != tuple(tensor.shape)
               for key, tensor in child.named_buffers(recurse=False))


def _conv(conv: nn.modules.conv._ConvNd, shape: torch.Size) -> None:  # noqa: SLF001
    transposed = conv.transposed
    first, second = int(shape[0]), int(shape[1])
    depthwise = conv.groups > 1 and conv.groups == conv.in_channels
    if transposed:  # weight: in × out/groups × k…
        conv.in_channels = first
        conv.groups = first if depthwise else conv.groups
        conv.out_channels = second * conv.groups
    else:  # weight: out × in/groups × k…
        conv.out_channels = first
        conv.groups = first if depthwise else conv.groups
        conv.in_channels = second * conv.groups


def _norm(norm: nn.Module, shape: tuple[int, ...]) -> None:
    if isinstance(norm, nn.GroupNorm):
        norm.num_channels = shape[0]
    elif isinstance(norm, nn.LayerNorm):
        norm.normalized_shape = shape
    else:
        norm.num_features = shape[0]
