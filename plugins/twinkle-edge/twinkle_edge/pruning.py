"""Structured pruning with torch-pruning: whole channels removed by group magnitude (L2), the classifier or
detection head kept at its size, the pruned network described by its tensors alone (Twinkle's checkpoint record
carries ``structure``, and core reshapes a freshly built network to the saved shapes before loading)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from twinkle_core.errors import TwinkleError


class PruningError(TwinkleError):
    """A network that cannot be pruned as asked (a ratio out of range, a graph torch-pruning cannot trace)."""


def prune_algorithm(algorithm: Any, example: torch.Tensor, ratio: float, channel_multiple: int = 8) -> dict[str, Any]:
    """Prune the network an algorithm names (``prunable_network``: the network, in
    a form torch-pruning can trace, and the layers it keeps — classifier or detection head), in place, and tell
    the algorithm (``on_pruned``: a moving average takes the new shapes); returns what changed."""
    network, keep = algorithm.prunable_network()
    info = prune_network(network, example, ratio, keep, channel_multiple)
    algorithm.on_pruned(network)
    return info


def prune_network(net: nn.Module, example: torch.Tensor, ratio: float, keep: list[nn.Module],
                  channel_multiple: int = 8) -> dict[str, Any]:
    """Remove ``ratio`` of the channels of every prunable group of ``net`` (in place), keeping the layers of
    ``keep`` at their size; returns what changed (parameters and MACs before and after, the layers kept).

    The channels left in each group are rounded to a multiple of ``channel_multiple`` (1: exactly the ratio):
    kernels are much slower on unaligned counts — ResNet-18 at 32×32 pruned 30 % ran 0.76 ms in onnxruntime
    with 44 channels per layer and 0.23 ms with 40 (the unpruned one: 0.44 ms).

    Raises:
        PruningError: ``ratio`` outside (0, 1), or the network cannot be traced.
    """
    import torch_pruning as tp

    if not 0 < ratio < 1:
        raise PruningError(f"pruning_ratio={ratio!r} must be between 0 and 1 (0.3 removes 30 % of the channels)")
    was_training = net.training
    net.eval()
    macs_before, params_before = tp.utils.count_ops_and_params(net, example)
    try:
        pruner = tp.pruner.MetaPruner(net, example, importance=tp.importance.GroupMagnitudeImportance(p=2),
                                      pruning_ratio=ratio, ignored_layers=keep,
                                      round_to=channel_multiple if channel_multiple > 1 else None)
        pruner.step()
    except Exception as err:  # noqa: BLE001 — torch-pruning's tracing errors, named for the user
        raise PruningError(f"torch-pruning could not prune {type(net).__name__}: {type(err).__name__}: {err}") from err
    macs_after, params_after = tp.utils.count_ops_and_params(net, example)
    net.train(was_training)
    return {"ratio": ratio, "importance": "group magnitude (L2)", "kept": [type(m).__name__ for m in keep],
            "channel_multiple": channel_multiple,
            "params_before": int(params_before), "params_after": int(params_after),
            "macs_before": int(macs_before), "macs_after": int(macs_after)}
