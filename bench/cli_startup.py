"""CLI start-up time: ``twinkle plugins list`` and ``twinkle algorithms list`` beside ``python -c pass``.

Runs each command several times, interleaved, and reports the median wall time and the ratio to a bare
interpreter start. Also records whether torch was imported (``python -X importtime``). Results go to
``bench/results/cli_startup.json``.

    python bench/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "cli_startup.json"


def _twinkle() -> list[str]:
    script = Path(sys.executable).with_name("twinkle")
    return [str(script)] if script.exists() else [sys.executable, "-m", "twinkle_core"]


def main() -> None:
    """Measure, print a table and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "twinkle plugins list --json": [*_twinkle(), "plugins", "list", "--json"],
        "twinkle algorithms list --json": [*_twinkle(), "algorithms", "list", "--json"],
    }
    for cmd in commands.values():  # warm the file cache and bytecode
        subprocess.run(cmd, capture_output=True, check=True)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["python -c pass"])
    listed = json.loads(subprocess.run(commands["twinkle plugins list --json"], capture_output=True, text=True,
                                       check=True).stdout)
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "twinkle_core", "plugins", "list"], capture_output=True, text=True
    ).stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines() if "|" in line}
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "runs": args.runs,
        "plugins": [f"{p['name']} {p['version']}" + (f" (error: {p['error']})" if p["error"] else "") for p in listed],
        "torch_imported_by_plugins_list": "torch" in imported,
        "commands": {
            name: {
                "median_s": round(statistics.median(t), 4),
                "min_s": round(min(t), 4),
                "ratio_to_python": round(statistics.median(t) / base, 2),
            }
            for name, t in times.items()
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'command':34} {'median s':>9} {'min s':>7} {'x python':>9}")
    for name, row in result["commands"].items():
        print(f"{name:34} {row['median_s']:9.3f} {row['min_s']:7.3f} {row['ratio_to_python']:9.2f}")
    print(f"plugins: {', '.join(result['plugins'])}; torch imported: {result['torch_imported_by_plugins_list']}")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
