"""Prepare the repository's cache folder so that libraries never reach the network.

ultralytics downloads ``Arial.ttf`` (and ``Arial.Unicode.ttf``) into ``$YOLO_CONFIG_DIR/Ultralytics`` the
first time it plots or checks a dataset. We copy matplotlib's DejaVuSans there instead, so nothing is
fetched. Run by ``make`` after installing; safe to run again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def main() -> int:
    """Create the cache folders named by the environment and place the fonts ultralytics looks for."""
    for var in ("XDG_CACHE_HOME", "MPLCONFIGDIR", "TORCH_HOME", "TORCH_EXTENSIONS_DIR", "HF_HOME"):
        if os.environ.get(var):
            Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    config_dir = os.environ.get("YOLO_CONFIG_DIR")
    if not config_dir:
        print("YOLO_CONFIG_DIR is not set; run this through make", file=sys.stderr)
        return 1
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed; no font to copy", file=sys.stderr)
        return 1
    font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    target_dir = Path(config_dir) / "Ultralytics"
    target_dir.mkdir(parents=True, exist_ok=True)
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (target_dir / name).exists():
            shutil.copyfile(font, target_dir / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
