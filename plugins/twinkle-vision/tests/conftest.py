"""Fixtures for twinkle-vision's tests: a run store per test and digits written as an image folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def twinkle_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh run store for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    return home


@pytest.fixture(scope="session")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's digits as ``<digit>/<n>.png`` (1,797 real 8×8 images)."""
    from twinkle_vision.samples import write_digits

    return write_digits(tmp_path_factory.mktemp("data") / "digits")
