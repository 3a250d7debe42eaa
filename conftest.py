"""Test-session defaults for every test folder (core and plugins), also when pytest runs without make.

One torch thread (a busy 2-core machine is many times slower with two), every library's cache inside the
repository's ignored ``.cache`` folder, ultralytics kept offline, and no speed probes before planning
(``TWINKLE_PROBE=0``: they take seconds per fit and their choices depend on the machine's load; the tests that
are about probes turn them on).
"""

from __future__ import annotations

import os
from pathlib import Path

_CACHE = Path(__file__).resolve().parent / ".cache"

CACHE_DEFAULTS = {
    "OMP_NUM_THREADS": "1",
    "XDG_CACHE_HOME": str(_CACHE / "xdg"),
    "MPLCONFIGDIR": str(_CACHE / "matplotlib"),
    "TORCH_HOME": str(_CACHE / "torch"),
    "TORCH_EXTENSIONS_DIR": str(_CACHE / "torch_extensions"),
    "HF_HOME": str(_CACHE / "huggingface"),
    "HF_HUB_OFFLINE": "1",
    "YOLO_CONFIG_DIR": str(_CACHE / "ultralytics"),
    "YOLO_OFFLINE": "1",
    "YOLO_AUTOINSTALL": "0",
    "TWINKLE_PROBE": "0",
}
"""The environment every test session starts from (tools/wheel_journeys.py gives it to the journeys too)."""

for _key, _value in CACHE_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
