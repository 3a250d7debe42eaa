"""Fixtures for twinkle-vision's tests: digits written as an image folder (a run store per test is
twinkle-core's ``twinkle_home`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's digits as ``<digit>/<n>.png`` (1,797 real 8×8 images)."""
    from twinkle_vision.samples import write_digits

    return write_digits(tmp_path_factory.mktemp("data") / "digits")


HEAVY = ("torch", "torchvision", "lightning", "pytorch_lightning", "timm", "ultralytics", "cv2", "twinkle_vision")
"""What a venv holding only core's wheel, onnxruntime, NumPy and Pillow lacks (``without_torch`` blocks them)."""

_WITHOUT_TORCH = f"""
import json, sys
HEAVY = {set(HEAVY)!r}
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"{{name}} is not installed here")
sys.meta_path.insert(0, Blocked())
from twinkle_core.cli import main
main(sys.argv[1:], standalone_mode=False)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)))
"""


@pytest.fixture(scope="session")
def without_torch():
    """Run ``twinkle ARGS...`` in a new process where torch, Lightning, timm, ultralytics, OpenCV and this plugin
    cannot be imported (as in a venv holding core's wheel without its dependencies, onnxruntime, NumPy and Pillow);
    it checks the command succeeded, imported none of them and loaded no plugin, and returns its output."""
    import subprocess
    import sys

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *args], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout  # nothing heavy was imported
        assert "failed to load" not in done.stderr, done.stderr  # no plugin was even tried
        return done.stdout

    return run
