"""Print uv's arguments for the package sources pip is configured with here (extra indexes, find-links).

``make`` installs with uv (its package cache links one copy of torch into every venv) but keeps pip's
configuration as the one place that says where packages come from.
"""

from __future__ import annotations

import subprocess
import sys


def pip_sources() -> list[str]:
    """uv arguments for pip's configured extra indexes and find-links (and its index, if it is not PyPI's)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    args: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        urls = value.strip().strip("'\"").split()
        if key.endswith(".extra-index-url"):
            args += [arg for url in urls for arg in ("--index", url)]
        elif key.endswith(".find-links"):
            args += [arg for url in urls for arg in ("--find-links", url)]
        elif key.endswith(".index-url"):
            args += ["--default-index", *urls[:1]]
    pairs = list(dict.fromkeys(zip(args[::2], args[1::2])))  # pip's env and file configs may repeat a source
    args = [part for pair in pairs for part in pair]
    # a package on both a local index and PyPI: take the best version from either (pins decide)
    return [*args, "--index-strategy", "unsafe-best-match"]


if __name__ == "__main__":
    print(" ".join(pip_sources()))
