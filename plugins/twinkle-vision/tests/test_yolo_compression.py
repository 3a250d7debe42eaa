"""YOLO's edge forms keep its outputs: C2f split in two convolutions computes what C2f does (and torch-pruning
can then shrink it), and the raw per-scale head maps decode on the CPU to the export module's output."""

from __future__ import annotations

import copy

import pytest
import torch

from twinkle_core.data import DataSpec
from twinkle_vision.yolo.compression import C2fSplit, split_c2f
from twinkle_vision.yolo.model import VARIANTS


def _perturb_norms(net: torch.nn.Module) -> None:
    """Trained-looking batch-norm statistics (a fresh BN is close to the identity and hides mistakes)."""
    generator = torch.Generator().manual_seed(0)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.copy_(torch.rand(module.num_features, generator=generator) * 0.4 - 0.2)
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(module.num_features, generator=generator) + 0.5)


@pytest.fixture(scope="module")
def detector():  # noqa: ANN201
    torch.manual_seed(0)
    algorithm = VARIANTS["yolov8n"]()
    spec = DataSpec(task="object_detection", input_shape=(3, 64, 64), num_classes=3, class_names=("a", "b", "c"), extra={"imgsz": 64})
    algorithm.configure_data(spec)
    _perturb_norms(algorithm.model)
    algorithm.ema_model.load_state_dict(algorithm.model.state_dict())
    return algorithm.eval()


def test_split_c2f_blocks_compute_what_c2f_computes(detector) -> None:
    model = copy.deepcopy(detector.model).eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)[0]
        assert split_c2f(model) == 8 and split_c2f(model) == 0  # yolov8n has 8 C2f blocks; splitting is repeatable
        got = model(x)[0]
    assert sum(isinstance(m, C2fSplit) for m in model.modules()) == 8
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_pruning_form_keeps_the_head_and_the_average_follows(detector) -> None:
    import torch_pruning as tp

    algorithm = copy.deepcopy(detector)
    network, keep = algorithm.prunable_network()
    assert network is algorithm.model and [type(m).__name__ for m in keep] == ["Detect"]
    example = torch.rand(1, 3, 64, 64)
    before = sum(p.numel() for p in network.parameters())
    pruner = tp.pruner.MetaPruner(network.eval(), example, importance=tp.importance.GroupMagnitudeImportance(p=2),
                                  pruning_ratio=0.3, ignored_layers=keep)
    pruner.step()
    algorithm.on_pruned(network)
    after = sum(p.numel() for p in network.parameters())
    assert after < 0.75 * before
    assert int(algorithm.ema_updates) == 0
    assert {k: v.shape for k, v in algorithm.ema_model.state_dict().items()} == \
        {k: v.shape for k, v in network.state_dict().items()}
    with torch.no_grad():
        assert algorithm.export_module()(example).shape == (1, 4 + 3, 84)  # 8² + 4² + 2² anchors at 64 px


def test_raw_head_maps_decode_to_the_export_output(detector) -> None:
    module, decode = detector.quantizable_export()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        expected = detector.export_module()(x)
        maps = module(x)
    assert [tuple(m.shape[1:]) for m in maps] == [(64, 8, 8), (3, 8, 8), (64, 4, 4), (3, 4, 4), (64, 2, 2), (3, 2, 2)]
    torch.testing.assert_close(decode(list(maps)), expected, rtol=1e-4, atol=1e-3)
