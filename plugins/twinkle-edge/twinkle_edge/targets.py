"""The targets ``EdgeOptimizer`` converts for, and how (no heavy imports)."""

from __future__ import annotations

from typing import Any

TARGETS: dict[str, dict[str, Any]] = {
    "onnx-int8": {"converter": "onnxruntime", "quantize": True,
                  "description": "ONNX, INT8 static QDQ (per channel, calibrated on real samples)"},
    "onnx": {"converter": "onnxruntime", "quantize": False, "description": "ONNX, float32"},
    **{name: {"converter": "rknn", "quantize": precisions["int8"], "float": precisions["float"],
              "description": f"Rockchip {name.upper()} NPU (.rknn via rknn-toolkit2; "
                             f"{' and '.join(k for k in ('int8', 'float') if precisions[k])})"}
       for name, precisions in {
           **{n: {"float": True, "int8": True} for n in ("rk3588", "rk3576", "rk3568", "rk3566", "rk3562", "rv1126b")},
           **{n: {"float": False, "int8": True} for n in ("rv1103", "rv1103b", "rv1106", "rv1106b")},
           "rk2118": {"float": True, "int8": False}}.items()},
}
"""Target name → converter, whether it quantizes, a description."""
