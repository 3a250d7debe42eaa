"""What ``twinkle doctor`` checks for twinkle-edge: rknn-toolkit2's converter venv, which only the RK3588 target
needs (pruning and INT8 ONNX work without it)."""

from __future__ import annotations

from twinkle_core.doctor import Finding


def rknn_converter() -> Finding:
    """The converter venv (``twinkle edge setup``) is there and made from the current pins."""
    from twinkle_edge.rknn.venv import ConverterMissingError, python, venv_dir

    try:
        interpreter = python()
    except ConverterMissingError:
        return Finding("optional", f"no converter venv at {venv_dir()}: only target='rk3588' needs it",
                       fix="twinkle edge setup (about 700 MB)")
    return Finding("ok", interpreter)
