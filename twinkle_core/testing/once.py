"""Work done once per test session and shared by every pytest-xdist worker: a trained run, a built site.

A session-scoped fixture runs once *per worker* under ``pytest -n 2``; ``once`` runs its ``make`` once per
*session*: the first worker to ask makes the folder while any other waits on a file lock, then every worker gets
the same folder. Whatever ``make`` writes there is read-only for the tests that use it (a test that changes a
shared run copies it first: ``copy_of``).

Example, in a plugin's ``conftest.py``:

```python
@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    def train(folder):
        Trainer("resnet18", hyperparams={"max_epochs": 3}, home=str(folder / "home")).fit(data=...)
    return once(tmp_path_factory, "resnet18-digits", train)
```
"""

from __future__ import annotations

import fcntl
import os
import shutil
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import pytest

DONE = ".twinkle-once-done"
"""The marker ``make`` finished (written last, so a folder without it is never used)."""
FAILED = ".twinkle-once-failed"
"""The error ``make`` raised, shown to every worker that asks afterwards instead of failing again slowly."""


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every worker of this pytest session shares (pytest's base temp, or under
    pytest-xdist the parent of the workers' own base temps)."""
    base = Path(tmp_path_factory.getbasetemp())
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """``make(folder)`` once per test session (across xdist workers); returns ``folder``.

    Args:
        tmp_path_factory: pytest's ``tmp_path_factory`` fixture.
        name: what is made (a folder name: letters, digits, ``-``, ``_``, ``.``).
        make: fills the empty folder it is given; what it returns is ignored.

    Raises:
        ValueError: ``name`` is not a folder name.
        RuntimeError: ``make`` failed earlier in this session, in this worker or another (its traceback is in the
            message); the call in which it fails raises its own error.
    """
    if not name or any(not (c.isalnum() or c in "-_.") for c in name):
        raise ValueError(f"once(): {name!r} is not a folder name (letters, digits, '-', '_', '.')")
    root = session_root(tmp_path_factory)
    folder = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until make() is done; released when the file closes
        if (folder / DONE).exists():
            return folder
        if (root / f"once-{name}{FAILED}").exists():
            raise RuntimeError(f"making {name!r} failed earlier in this session:\n"
                               + (root / f"once-{name}{FAILED}").read_text())
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            make(folder)
        except BaseException:
            (root / f"once-{name}{FAILED}").write_text(traceback.format_exc())
            raise
        (folder / DONE).write_text("")
    return folder


def copy_of(shared: Path, destination: Path) -> Path:
    """A private copy of a shared folder for a test that changes it; returns ``destination``."""
    shutil.copytree(shared, destination, ignore=shutil.ignore_patterns(DONE))
    return destination
