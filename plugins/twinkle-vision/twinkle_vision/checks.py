"""What ``twinkle doctor`` checks for twinkle-vision: timm (the ResNets) and ultralytics (YOLO, the optional
``yolo`` extra)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from twinkle_core.doctor import Finding


def timm_models() -> Finding:
    """timm, which builds the ResNet family."""
    try:
        return Finding("ok", f"timm {version('timm')}")
    except PackageNotFoundError:
        return Finding("missing", "timm is not installed", fix="pip install twinkle-vision")


def ultralytics_yolo() -> Finding:
    """ultralytics (AGPL-3.0), which the YOLO detectors need: the ``yolo`` extra."""
    try:
        return Finding("ok", f"ultralytics {version('ultralytics')} (AGPL-3.0)")
    except PackageNotFoundError:
        return Finding("optional", "ultralytics is not installed: only the YOLO detectors need it (AGPL-3.0)",
                       fix="pip install 'twinkle-vision[yolo]'")
