"""Keep ultralytics offline: no font download, no update checks, no telemetry, no pip installs.

Call ``prepare`` before importing ultralytics. It sets (unless already set) ``YOLO_OFFLINE=1``,
``YOLO_AUTOINSTALL=0`` and ``YOLO_CONFIG_DIR`` (under ``$XDG_CACHE_HOME/twinkle/ultralytics``), and places
matplotlib's DejaVuSans where ultralytics looks for ``Arial.ttf`` and ``Arial.Unicode.ttf``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from twinkle_core.data import local_cache_dir

_DONE = False


def prepare() -> None:
    """Apply the offline settings once per process."""
    global _DONE
    if _DONE:
        return
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(local_cache_dir(), "ultralytics"))
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "0")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    fonts = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    fonts.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        source = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
        for name in ("Arial.ttf", "Arial.Unicode.ttf"):
            if not (fonts / name).exists():
                shutil.copyfile(source, fonts / name)
    except ImportError:  # no matplotlib: ultralytics only needs the font for plots, which Twinkle turns off
        pass
    from ultralytics.utils import SETTINGS

    SETTINGS.update({"sync": False})
    _DONE = True
