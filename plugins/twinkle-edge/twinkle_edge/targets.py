"""The targets :class:`~twinkle_edge.EdgeOptimizer` converts for, and how (no heavy imports)."""

from __future__ import annotations

from typing import Any

TARGETS: dict[str, dict[str, Any]] = {
    "onnx-int8": {"converter": "onnxruntime", "quantize": True,
                  "description": "ONNX, INT8 static QDQ (per channel, calibrated on real samples)"},
    "onnx": {"converter": "onnxruntime", "quantize": False, "description": "ONNX, float32"},
}
"""Target name → converter, whether it quantizes, a description."""
