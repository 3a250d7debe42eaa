"""RKNN conversion through rknn-toolkit2's own venv: a small CNN exported to ONNX becomes a ``.rknn`` for
rk3588, float and INT8 (calibrated on real-looking samples), and rknn's simulator agrees with PyTorch; bad
targets, precisions, opsets and a missing converter venv are named errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from twinkle_edge.rknn.convert import RKNNError, to_rknn
from twinkle_edge.rknn.venv import ConverterMissingError, setup

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def converter() -> str:
    return setup()  # made once per environment (inside its venv), kept while its pins are the same


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module, np.ndarray]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(32, 10)).eval()
    for module in net.modules():  # trained-looking statistics, not the identity of a fresh BN
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("onnx") / "cnn.onnx"
    torch.onnx.export(net, torch.rand(1, 3, 32, 32), str(path), opset_version=17, dynamo=False,
                      input_names=["input"], output_names=["logits"])
    samples = np.random.default_rng(0).random((24, 3, 32, 32), dtype=np.float32)  # images in [0, 1]
    return path, net, samples


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("quantize", [False, True], ids=["float", "int8"])
def test_rk3588_conversion_agrees_with_pytorch_in_the_simulator(converter, small_cnn, tmp_path, quantize) -> None:
    path, net, samples = small_cnn
    result = to_rknn(str(path), str(tmp_path / "cnn.rknn"), "rk3588", quantize=quantize, calibration=samples[:16],
                     inputs=samples[16:])
    with torch.no_grad():
        expected = net(torch.from_numpy(samples[16:])).numpy()
    assert result["outputs"].shape == (8, 10)
    assert _cosine(result["outputs"], expected) >= (0.99 if quantize else 0.9999)
    assert (result["outputs"].argmax(1) == expected.argmax(1)).mean() >= 0.75
    assert (tmp_path / "cnn.rknn").stat().st_size == result["rknn_bytes"] > 1000


def test_bad_targets_precisions_opsets_and_a_missing_converter_are_named(converter, small_cnn, tmp_path,
                                                                          monkeypatch) -> None:
    path, _, samples = small_cnn
    with pytest.raises(RKNNError, match="unknown RKNN target 'rk9999'.*rk3588"):
        to_rknn(str(path), str(tmp_path / "x.rknn"), "rk9999", calibration=samples)
    with pytest.raises(RKNNError, match="rv1106 does not run float models.*quantize=True"):
        to_rknn(str(path), str(tmp_path / "x.rknn"), "rv1106", quantize=False, inputs=samples[:1])
    with pytest.raises(RKNNError, match="INT8 needs calibration"):
        to_rknn(str(path), str(tmp_path / "x.rknn"), "rk3588", quantize=True)
    newer = tmp_path / "op20.onnx"
    torch.onnx.export(nn.Linear(4, 2), torch.rand(1, 4), str(newer), opset_version=20, dynamo=False)
    with pytest.raises(RKNNError, match="has opset=20: rknn-toolkit2 reads opsets up to 19"):
        to_rknn(str(newer), str(tmp_path / "x.rknn"), "rk3588", quantize=False, inputs=np.zeros((1, 4), np.float32))
    monkeypatch.setenv("TWINKLE_RKNN_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(ConverterMissingError, match="twinkle edge setup"):
        to_rknn(str(path), str(tmp_path / "x.rknn"), "rk3588", quantize=False, inputs=samples[:1])


def test_a_board_that_is_not_attached_is_named_and_leaves_no_adb_server(converter, small_cnn, tmp_path,
                                                                         monkeypatch) -> None:
    import socket
    import subprocess

    from twinkle_edge.rknn.convert import RKNNSession
    from twinkle_edge.rknn.venv import venv_dir

    path, _, samples = small_cnn
    with socket.socket() as probe:  # rknn reaches boards through adb: its server on a port of this test's own
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    monkeypatch.setenv("HOME", str(tmp_path))  # adb writes its keys under ~/.android
    adb = next(venv_dir().glob("lib/python*/site-packages/rknn/3rdparty/platform-tools/adb/linux-x86_64/adb"))
    try:
        with RKNNSession() as session:
            session.build(str(path), str(tmp_path / "cnn.rknn"), "rk3588", quantize=False)
            with pytest.raises(RKNNError, match="init_runtime.*on board 'no-such-board'.*not found"):
                session.board(str(tmp_path / "cnn.rknn"), "rk3588", "no-such-board", samples[:2])
            assert session.run(samples[:2])[0].shape == (2, 10)  # the simulator still holds the model
    finally:
        subprocess.run([str(adb), "-P", str(port), "kill-server"], capture_output=True, timeout=60)
