"""YOLOv8n trained by Twinkle's engine against ultralytics' own trainer: same data, epochs, batch and seed.

Data: ``twinkle_vision.samples.write_shapes`` (300 train / 60 val images at 160 px, 1–4 solid shapes of 3
classes on noisy or gradient backgrounds). Both train on CPU, one thread, no AMP, no workers, and report the
best mAP50 and mAP50-95 over the epochs, and the wall time per epoch (training and validation). Writes
``bench/results/yolo_parity.json``. Goals: Twinkle's mAP50 within 0.03 of ultralytics', ≥ 0.5 within 10
minutes, epoch time ratio ≤ 1.05.

    python bench/yolo_parity.py [--epochs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

RESULTS = Path(__file__).resolve().parent / "results" / "yolo_parity.json"


def run_ultralytics(data: Path, epochs: int, batch: int, imgsz: int, seed: int, work: Path) -> dict:
    """ultralytics' own trainer."""
    import pandas as pd
    from ultralytics import YOLO

    start = time.perf_counter()
    model = YOLO("yolov8n.yaml")
    model.train(data=str(data), epochs=epochs, imgsz=imgsz, batch=batch, workers=0, amp=False, plots=False,
                seed=seed, deterministic=True, device="cpu", project=str(work), name="ultralytics", exist_ok=True,
                verbose=False, val=True)
    seconds = time.perf_counter() - start
    results = pd.read_csv(work / "ultralytics" / "results.csv")
    results.columns = [c.strip() for c in results.columns]
    return {"map50": float(results["metrics/mAP50(B)"].max()), "map50_95": float(results["metrics/mAP50-95(B)"].max()),
            "seconds": round(seconds, 1), "seconds_per_epoch": round(seconds / epochs, 3),
            "map50_by_epoch": [round(float(v), 4) for v in results["metrics/mAP50(B)"]]}


def run_twinkle(data: Path, epochs: int, batch: int, imgsz: int, seed: int) -> dict:
    """Twinkle's Trainer (plan, run store, checkpoints, EMA, ultralytics' validator)."""
    import pandas as pd

    from twinkle_core import Trainer

    start = time.perf_counter()
    result = Trainer("yolov8n", hyperparams={"max_epochs": epochs, "batch_size": batch, "imgsz": imgsz, "seed": seed},
                     progress_bar=False, verbose=False).fit(str(data.parent))
    seconds = time.perf_counter() - start
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    series = metrics["val_map50"].dropna()
    return {"map50": float(series.max()), "map50_95": float(metrics["val_map50_95"].dropna().max()),
            "seconds": round(seconds, 1), "seconds_per_epoch": round(seconds / epochs, 3),
            "map50_by_epoch": [round(float(v), 4) for v in series], "run": result.run_uri,
            "accumulate_grad_batches": result.plan.accumulate_grad_batches}


def main() -> None:
    """Train both, print the comparison and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="twinkle-yolo-bench-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    from twinkle_vision.samples import write_shapes
    from twinkle_vision.yolo import offline

    offline.prepare()
    data = write_shapes(work / "shapes", train=300, val=60, size=args.imgsz, seed=args.seed)
    twinkle = run_twinkle(data, args.epochs, args.batch, args.imgsz, args.seed)
    print(f"twinkle: mAP50 {twinkle['map50']:.3f} in {twinkle['seconds']:.0f} s", flush=True)
    reference = run_ultralytics(data, args.epochs, args.batch, args.imgsz, args.seed, work)
    print(f"ultralytics: mAP50 {reference['map50']:.3f} in {reference['seconds']:.0f} s", flush=True)
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "threads": int(os.environ["OMP_NUM_THREADS"])},
        "setup": vars(args) | {"train_images": 300, "val_images": 60},
        "twinkle": twinkle,
        "ultralytics": reference,
        "map50_gap": round(reference["map50"] - twinkle["map50"], 4),
        "epoch_time_ratio": round(twinkle["seconds_per_epoch"] / reference["seconds_per_epoch"], 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"mAP50 twinkle {twinkle['map50']:.3f} vs ultralytics {reference['map50']:.3f} (gap {result['map50_gap']:+.3f}); "
          f"epoch time ratio {result['epoch_time_ratio']:.3f}")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
