"""twinkle-vision: Image classification (ResNet family via timm) and object detection (YOLO v8/11 via ultralytics).

The Twinkle plugin lives in ``twinkle_vision.plugin``; it is found through the ``twinkle`` entry-point group.
"""

from __future__ import annotations

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-vision")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"
