"""TPE (Twinkle's tuner) against random search on a cheap real objective, over several seeds.

Objective: ``tabular-mlp`` on scikit-learn's digits (1,797 images of 8×8 pixels as 64 features, 10
classes), 3 epochs, validation accuracy. Space: lr (1e-5–1e-1, log), weight_decay (1e-6–1e-1, log),
dropout (0–0.5), batch_size (16, 32, 64, 128). Each seed runs both samplers for the same number of trials,
without pruning or warm start, through ``Trainer.tune``. Writes ``bench/results/tune_vs_random.json``.

    python bench/tune_vs_random.py [--trials 20] [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from twinkle_core import Trainer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "tune_vs_random.json"
SPACE = {"lr": (1e-5, 1e-1), "weight_decay": (1e-6, 1e-1), "dropout": (0.0, 0.5), "batch_size": [16, 32, 64, 128]}


def main() -> None:
    """Run both samplers for every seed, print a table and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="twinkle-tune-bench-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    from sklearn.datasets import load_digits

    data = work / "digits.csv"
    load_digits(as_frame=True).frame.to_csv(data, index=False)
    best: dict[str, list[float]] = {"tpe": [], "random": []}
    seconds: dict[str, float] = {"tpe": 0.0, "random": 0.0}
    for seed in range(args.seeds):
        for sampler in ("tpe", "random"):
            start = time.perf_counter()
            trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": args.epochs}, verbose=False)
            result = trainer.tune(SPACE, max_trials=args.trials, data=str(data), seed=seed, sampler=sampler,
                                  pruning=False, warm_start=False, study_name=f"bench-{sampler}-{seed}")
            seconds[sampler] += time.perf_counter() - start
            best[sampler].append(result.best_value)
            print(f"seed {seed}: {sampler:6} best val_accuracy {result.best_value:.4f}", flush=True)
    summary = {
        sampler: {"median_best": statistics.median(v), "mean_best": statistics.fmean(v), "per_seed": v,
                  "seconds": round(seconds[sampler], 1)}
        for sampler, v in best.items()
    }
    wins = sum(t > r for t, r in zip(best["tpe"], best["random"]))
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "objective": f"tabular-mlp on digits, {args.epochs} epochs, val_accuracy",
        "space": {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in SPACE.items()},
        "trials": args.trials, "seeds": args.seeds, "tpe_startup_trials": max(3, min(10, args.trials // 4)),
        "samplers": summary, "tpe_wins": wins, "ties": sum(t == r for t, r in zip(best["tpe"], best["random"])),
        "median_gain": summary["tpe"]["median_best"] - summary["random"]["median_best"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nmedian best over {args.seeds} seeds after {args.trials} trials: TPE "
          f"{summary['tpe']['median_best']:.4f}, random {summary['random']['median_best']:.4f} "
          f"(TPE better on {wins} of {args.seeds} seeds)")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
