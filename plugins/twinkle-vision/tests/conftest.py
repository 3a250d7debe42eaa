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
