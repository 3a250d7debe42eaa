"""A structurally pruned network reloads from its config plus tensors: ``reshape_to_state`` gives a freshly
built network the saved channel counts (convolutions, grouped and depthwise ones, linear layers, norms), and
the engine does it for a checkpoint whose record says ``structure``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from twinkle_core.engine.reshape import reshape_to_state
from twinkle_core.errors import TwinkleError


def _net(width: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, width, 3, padding=1, groups=width), nn.GroupNorm(1, width), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 16), nn.LayerNorm(16),
                         nn.Linear(16, 4))


def test_a_narrower_network_is_rebuilt_exactly_from_its_tensors() -> None:
    torch.manual_seed(0)
    pruned = _net(5).eval()
    rebuilt = _net(12).eval()
    changed = reshape_to_state(rebuilt, pruned.state_dict())
    assert changed == ["0", "1", "3", "4", "8"]
    rebuilt.load_state_dict(pruned.state_dict(), strict=True)
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(rebuilt(x), pruned(x))
    assert rebuilt[3].groups == 5 and rebuilt[3].in_channels == 5 and rebuilt[1].num_features == 5
    assert reshape_to_state(rebuilt, pruned.state_dict()) == []  # already the right shapes


def test_torch_pruning_output_reloads_into_a_fresh_timm_resnet() -> None:
    timm = pytest.importorskip("timm")
    tp = pytest.importorskip("torch_pruning")
    torch.manual_seed(0)
    net = timm.create_model("resnet18", num_classes=10).eval()
    for module in net.modules():  # timm zero-initialises each block's last BN scale: give the branches weight
        if isinstance(module, nn.BatchNorm2d):
            nn.init.uniform_(module.weight, 0.5, 1.5)
    x = torch.randn(2, 3, 32, 32)
    tp.pruner.MetaPruner(net, x, importance=tp.importance.GroupMagnitudeImportance(p=2), pruning_ratio=0.3,
                         ignored_layers=[net.fc]).step()
    fresh = timm.create_model("resnet18", num_classes=10).eval()
    reshape_to_state(fresh, net.state_dict())
    fresh.load_state_dict(net.state_dict(), strict=True)
    assert torch.allclose(fresh(x), net(x), atol=1e-5)
    assert sum(p.numel() for p in fresh.parameters()) < 0.6 * 11_181_642


def test_a_tensor_no_module_kind_can_take_is_a_named_error() -> None:
    class Odd(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(n))

    with pytest.raises(TwinkleError, match=r"cannot reshape weight \(Odd\) from \(3,\) to \(2,\)"):
        reshape_to_state(Odd(3), {"weight": torch.zeros(2)})
