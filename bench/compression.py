"""Gradient compression on 2 CPU processes (DDP over gloo): bytes all-reduced per step and accuracy, side by side.

``tabular-mlp`` with hidden layers (512, 256) on scikit-learn's digits (1,797 rows, 64 features, 10 classes),
10 epochs, batch 32 per process, seed 0, for ``gradient_compression`` = none, bf16, fp16 and powersgd. The
bytes are what rank 0's communication hook all-reduced per optimizer step (counted in the hook; PowerSGD's
first 10 steps are a plain all-reduce). Writes ``bench/results/compression.json``.

    python bench/compression.py
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

KINDS = ("none", "bf16", "fp16", "powersgd")
HP = {"devices": 2, "accelerator": "cpu", "batch_size": 32, "max_epochs": 10, "seed": 0, "progress_bar": False,
      "hidden_sizes": [512, 256], "dropout": 0.1}


def train(kind: str, data: str, out: str) -> None:
    """One 2-process fit (Lightning runs this script again for rank 1); rank 0 writes ``out``."""
    from twinkle_core import RunStore, Trainer

    result = Trainer("tabular-mlp", hyperparams={**HP, "gradient_compression": kind}, project=kind,
                     verbose=False).fit(data)
    if int(os.environ.get("LOCAL_RANK", 0)) == 0:
        measured = RunStore().get(result.run_uri).measured
        Path(out).write_text(json.dumps({"kind": kind, "best_val_accuracy": result.best_metric,
                                         "final_val_loss": result.metrics.get("val_loss"),
                                         "allreduce_bytes_per_step": measured.get("allreduce_bytes_per_step"),
                                         "train_seconds": measured.get("train_seconds")}))


def main() -> None:
    """Run every kind in its own job and write the comparison."""
    from sklearn.datasets import load_digits

    work = Path(tempfile.mkdtemp(prefix="twinkle-compression-"))
    data = work / "digits.csv"
    load_digits(as_frame=True).frame.to_csv(data, index=False)
    env = {**os.environ, "TWINKLE_HOME": str(work / "home"), "PYTHONWARNINGS": "ignore"}
    rows = {}
    for kind in KINDS:
        out = work / f"{kind}.json"
        subprocess.run([sys.executable, __file__, "--train", kind, str(data), str(out)], env=env, check=True,
                       start_new_session=True)
        rows[kind] = json.loads(out.read_text())
        print(json.dumps(rows[kind]), flush=True)
    plain = rows["none"]
    for row in rows.values():
        row["bytes_vs_none"] = round(row["allreduce_bytes_per_step"] / plain["allreduce_bytes_per_step"], 4)
        row["accuracy_points_vs_none"] = round(100 * (row["best_val_accuracy"] - plain["best_val_accuracy"]), 2)
    result = {"what": "2-process DDP (gloo, CPU), tabular-mlp (512, 256) on digits, 10 epochs, seed 0",
              "kinds": rows, "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
              "goal": "compressed runs within 1 accuracy point of 'none', fewer bytes"}
    out = Path(__file__).resolve().parent / "results" / "compression.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'kind':10} {'bytes/step':>12} {'× none':>7} {'accuracy':>9} {'Δ points':>9}")
    for kind, row in rows.items():
        print(f"{kind:10} {row['allreduce_bytes_per_step']:12.0f} {row['bytes_vs_none']:7.3f} "
              f"{row['best_val_accuracy']:9.4f} {row['accuracy_points_vs_none']:9.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--train":
        train(*sys.argv[2:])
    else:
        main()
