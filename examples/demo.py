"""The Twinkle demo: what is installed and what it offers.

Training, export and the run store arrive with the engine (issue 3); until then the demo shows the plugin
system: every installed plugin and the components they register.
"""

from __future__ import annotations

import subprocess
import sys


def main() -> None:
    """Print the installed plugins and every registered component."""
    twinkle = [sys.executable, "-m", "twinkle_core"]
    for args in (["--version"], ["plugins", "list", "--all"], ["algorithms", "list"], ["exporters", "list"]):
        print(f"$ twinkle {' '.join(args)}", flush=True)
        subprocess.run([*twinkle, *args], check=True)
        print()


if __name__ == "__main__":
    main()
