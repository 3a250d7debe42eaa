"""The rknn-toolkit2 converter venv: where it is, making it (``twinkle edge setup``), and finding it.

It is made with this interpreter's version, holds rknn-toolkit2 (``--no-deps``) and the pins of
``requirements.txt``, and borrows torch — which rknn imports but never runs for ONNX conversion — from the
training environment through a ``.pth`` line appended *after* its own packages, so its numpy and onnx win.
A stamp records the requirements it was made from; a changed pin makes it again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from twinkle_core.data import local_cache_dir
from twinkle_core.errors import TwinkleError

RKNN_TOOLKIT = "rknn-toolkit2==2.5.0"
"""The converter release the worker is written for."""
VENV_ENV = "TWINKLE_RKNN_VENV"
"""Environment variable naming the converter venv (default: see ``venv_dir``)."""
REQUIREMENTS = Path(__file__).with_name("requirements.txt")


class ConverterMissingError(TwinkleError):
    """The rknn-toolkit2 converter venv is not there (or is broken)."""


def venv_dir() -> Path:
    """Where the converter venv lives: ``$TWINKLE_RKNN_VENV``; else, in a virtual environment, inside it
    (``<venv>/share/twinkle/rknn-venv``) — the converter borrows that environment's torch, so it belongs to it, and
    whoever activates the environment finds it with no variable set; else ``<cache>/rknn-venv``."""
    if os.environ.get(VENV_ENV):
        return Path(os.environ[VENV_ENV])
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "share" / "twinkle" / "rknn-venv"
    return Path(local_cache_dir()) / "rknn-venv"


def _stamp_text() -> str:
    digest = hashlib.md5((RKNN_TOOLKIT + REQUIREMENTS.read_text() + sys.version).encode()).hexdigest()
    return f"{RKNN_TOOLKIT} {digest}\n"


def python() -> str:
    """The converter venv's interpreter.

    Raises:
        ConverterMissingError: no venv (or one made from other pins), naming the command that makes it.
    """
    folder = venv_dir()
    interpreter = folder / "bin" / "python"
    stamp = folder / "twinkle-stamp.txt"
    if not interpreter.exists() or not stamp.exists() or stamp.read_text() != _stamp_text():
        raise ConverterMissingError(f"rknn-toolkit2's converter venv is missing or out of date at {folder}; make it "
                                    f"with 'twinkle edge setup' (about 700 MB; set ${VENV_ENV} to put it elsewhere)")
    return str(interpreter)


INSTALLERS = ("pip", "uv")
"""What installs the converter venv's packages: the venv's own pip (the default), or uv (parallel downloads and
installs; bytecode compiled at install as pip does) when it is installed here or on ``PATH``."""


def _installer(installer: str, interpreter: Path) -> list[str]:
    """The install command of ``installer`` (one of ``INSTALLERS``) for the venv of ``interpreter``."""
    if installer == "pip":
        return [str(interpreter), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise ConverterMissingError("installer='uv', but uv is not installed here or on PATH; pip install uv, or "
                                    "make the converter venv with pip (the default)")
    return [uv, "pip", "install", "-q", "--python", str(interpreter), "--compile-bytecode"]


def setup(force: bool = False, echo: object = print, installer: str = "pip") -> str:
    """Make (or keep) the converter venv; returns its interpreter. ``installer``: ``pip`` or ``uv``."""
    if installer not in INSTALLERS:
        raise TwinkleError(f"installer={installer!r}: choose one of {', '.join(INSTALLERS)}")
    folder = venv_dir()
    if not force:
        try:
            return python()
        except ConverterMissingError:
            pass
    install = _installer(installer, folder / "bin" / "python")  # a missing uv is named before anything is made
    echo(f"Making rknn-toolkit2's converter venv at {folder} ({installer}) ...")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    _run(install + ["-r", str(REQUIREMENTS)])
    _run(install + ["--no-deps", RKNN_TOOLKIT])
    site = subprocess.run([str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    training = sysconfig.get_paths()["purelib"]
    Path(site, "twinkle-borrow-torch.pth").write_text(f"import sys; sys.path.append({training!r})\n")
    check = subprocess.run([str(folder / "bin" / "python"), "-c", "from rknn.api import RKNN; import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise ConverterMissingError(f"the converter venv at {folder} cannot import rknn: {check.stderr[-1500:]}")
    (folder / "twinkle-stamp.txt").write_text(_stamp_text())
    return str(folder / "bin" / "python")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ConverterMissingError(f"'{' '.join(command)}' failed: {done.stderr[-2000:]}")
