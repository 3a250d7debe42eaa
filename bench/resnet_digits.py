"""Time of the ResNet-18 digits fit that twinkle-vision's test checks for accuracy (its budget: two minutes).

The test asserts only what the model learns; how long it takes depends on the machine, so it is measured
here: the same fit (10 epochs at 32×32, one torch thread), wall seconds against the 120 s budget.
Writes ``bench/results/resnet_digits.json``.

    python bench/resnet_digits.py
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

BUDGET_SECONDS = 120.0


def main() -> int:
    """Fit once, write the figures, and exit 1 when the budget is exceeded."""
    from twinkle_core import Trainer
    from twinkle_vision.samples import write_digits

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "digits"
        write_digits(data)
        trainer = Trainer("resnet18", task="image_classification", home=str(Path(tmp) / "home"), verbose=False,
                          hyperparams={"max_epochs": 10, "image_size": 32, "use_mmap": True, "progress_bar": False})
        start = time.perf_counter()
        result = trainer.fit(data=str(data))
        seconds = time.perf_counter() - start
    figures = {
        "case": "resnet18 on digits, 10 epochs at 32x32, one thread",
        "seconds": round(seconds, 1),
        "budget_seconds": BUDGET_SECONDS,
        "fraction_of_budget": round(seconds / BUDGET_SECONDS, 3),
        "best_val_accuracy": result.best_metric,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
    }
    out = Path(__file__).resolve().parent / "results" / "resnet_digits.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0 if seconds <= BUDGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
