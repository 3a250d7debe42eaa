"""The Twinkle plugin of twinkle-edge, found through the ``twinkle`` entry-point group.

It registers the exporters ``rknn`` (Rockchip NPUs through rknn-toolkit2, verified in its simulator) and
``onnx-int8``, and the ``twinkle edge`` commands (``setup``, ``optimize``, ``targets``); ``from twinkle_edge import
EdgeOptimizer`` is the library entry point. Like every Twinkle plugin module it imports nothing heavy at its
top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl
from twinkle_edge.targets import TARGETS


@hookimpl
def register_exporters(register: Register) -> None:
    """``rknn`` and ``onnx-int8``, each with the targets it converts for."""
    register("rknn", "twinkle_edge.exporters:RKNNExporter", format="rknn",
             targets=sorted(name for name, info in TARGETS.items() if info["converter"] == "rknn"),
             description="Rockchip NPUs via rknn-toolkit2 (target=rk3588 by default; float or quantize=True for "
                         "INT8), verified in its simulator")
    register("onnx-int8", "twinkle_edge.exporters:ONNXInt8Exporter", format="onnx-int8", targets=["cpu"],
             description="ONNX, INT8 static QDQ (per channel, calibrated on the run's training samples)")


@hookimpl
def register_commands(register: Register) -> None:
    """``twinkle edge``."""
    register("edge", "twinkle_edge.cli:edge",
             description="Prune, fine-tune back, quantize and measure trained models for edge devices")


@hookimpl
def register_checks(register: Register) -> None:
    """``twinkle doctor``: rknn-toolkit2's converter venv (the RK3588 target only)."""
    register("rknn-converter", "twinkle_edge.checks:rknn_converter",
             description="rknn-toolkit2's converter venv (twinkle edge setup), for target='rk3588'")
