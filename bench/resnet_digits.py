"""Time of the ResNet-18 fits that twinkle-vision's tests check for accuracy (their budget: two minutes each).

The tests assert only what the model learns; how long it takes depends on the machine, so it is measured
here, one torch thread, wall seconds against the 120 s budget:

* ``digits``: scikit-learn's 8×8 digits as PNGs, 10 epochs, no ``image_size`` (the plan upsamples to 32);
* ``as_found``: 600 of them as RGB JPEGs of 16–96 px plus an RGBA PNG and a palette GIF, the article's call
  (``lr`` 1e-3, ``batch_size`` 64, no ``image_size``), 10 epochs — the input size the plan chose is recorded.

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


def _fit(data: Path, home: Path, hyperparams: dict) -> dict:
    from twinkle_core import Trainer

    trainer = Trainer("resnet18", task="image_classification", home=str(home), verbose=False,
                      hyperparams={"max_epochs": 10, "progress_bar": False, **hyperparams})
    start = time.perf_counter()
    result = trainer.fit(data=str(data))
    seconds = time.perf_counter() - start
    size = next(d for d in result.plan.decisions if d.name == "input_size")
    return {"seconds": round(seconds, 1), "budget_seconds": BUDGET_SECONDS,
            "fraction_of_budget": round(seconds / BUDGET_SECONDS, 3), "best_val_accuracy": result.best_metric,
            "input_size": size.value, "input_size_reason": size.reason}


def main() -> int:
    """Fit both cases, write the figures, and exit 1 when a budget is exceeded."""
    from twinkle_vision.samples import write_digits, write_digits_as_found

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = {
            "digits": {"case": "resnet18 on digits (1,797 8x8 PNGs), 10 epochs, default input size, one thread",
                       **_fit(write_digits(work / "digits"), work / "home", {"use_mmap": True})},
            "as_found": {"case": "resnet18 on 600 digits as 16-96 px JPEGs (+RGBA PNG, palette GIF), the "
                                 "article's call, 10 epochs, one thread",
                         **_fit(write_digits_as_found(work / "found"), work / "home",
                                {"lr": 1e-3, "batch_size": 64})},
        }
    figures = {**cases, "machine": f"{platform.machine()} {os.cpu_count()} cores"}
    out = Path(__file__).resolve().parent / "results" / "resnet_digits.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0 if all(c["seconds"] <= BUDGET_SECONDS for c in cases.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
