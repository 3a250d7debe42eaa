"""twinkle-edge: Edge deployment: pruning, INT8 quantization and RK3588 (RKNN) conversion.

The Twinkle plugin lives in ``twinkle_edge.plugin``; it is found through the ``twinkle`` entry-point group.
"""

from __future__ import annotations

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-edge")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"
