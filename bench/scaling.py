"""Scaling on this machine: the same fit with 1 process and with 2 (DDP over gloo), one torch thread each.

``resnet18`` on scikit-learn's digits (1,797 images, 32×32 after the plan's upsampling), 3 epochs, batch 64 per
process, seed 0. Throughput is each run's measured ``job_samples_per_second`` (training steps only, from the
utilisation the engine records); scaling efficiency = 2-process throughput / (2 × 1-process throughput).
Also recorded: MFU against the measured CPU matmul peak and the data-wait share. Writes
``bench/results/scaling.json``.

    python bench/scaling.py
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HP = {"accelerator": "cpu", "batch_size": 64, "max_epochs": 3, "seed": 0, "progress_bar": False, "use_mmap": True}


def train(devices: str, data: str, out: str) -> None:
    """One fit on ``devices`` processes (Lightning runs this script again for rank 1); rank 0 writes ``out``."""
    from twinkle_core import RunStore, Trainer

    result = Trainer("resnet18", hyperparams={**HP, "devices": int(devices)}, project=f"p{devices}",
                     verbose=False).fit(data)
    if int(os.environ.get("LOCAL_RANK", 0)) == 0:
        measured = RunStore().get(result.run_uri).measured
        Path(out).write_text(json.dumps({"processes": int(devices), "strategy": result.plan.strategy,
                                         "best_val_accuracy": result.best_metric, **measured}))


def main() -> None:
    """Run 1 and 2 processes and write the comparison."""
    from twinkle_vision.samples import write_digits

    work = Path(tempfile.mkdtemp(prefix="twinkle-scaling-"))
    data = write_digits(work / "digits")
    env = {**os.environ, "TWINKLE_HOME": str(work / "home"), "PYTHONWARNINGS": "ignore"}
    rows = {}
    for devices in ("1", "2"):
        out = work / f"{devices}.json"
        subprocess.run([sys.executable, __file__, "--train", devices, str(data), str(out)], env=env, check=True,
                       start_new_session=True)
        rows[devices] = json.loads(out.read_text())
        print(json.dumps(rows[devices]), flush=True)
    one, two = rows["1"]["job_samples_per_second"], rows["2"]["job_samples_per_second"]
    result = {
        "what": "resnet18 on digits (32x32), 3 epochs, batch 64 per process, 1 vs 2 CPU processes (gloo), 1 thread each",
        "runs": rows, "speedup": round(two / one, 3), "scaling_efficiency": round(two / (2 * one), 3),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    out = Path(__file__).resolve().parent / "results" / "scaling.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for devices, row in rows.items():
        print(f"{devices} process(es): {row['job_samples_per_second']:.1f} samples/s, MFU {row.get('mfu')}, "
              f"data wait {row.get('data_wait_fraction')}, accuracy {row['best_val_accuracy']:.4f}")
    print(f"speedup {result['speedup']}, scaling efficiency {result['scaling_efficiency']}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--train":
        train(*sys.argv[2:])
    else:
        main()
