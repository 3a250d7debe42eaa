"""The Twinkle demo: real images in, a verified INT8 ONNX model out, everything recorded in the run store.

1. writes scikit-learn's digits (1,797 real 8×8 greyscale images) as an image folder, one folder per digit;
2. trains ``resnet18`` (timm, random init, twinkle-vision's default recipe) for 10 epochs through ``Trainer`` —
   the resource plan is printed first, and says why the input is 32×32 (the 8×8 images upsampled to the
   smallest side ResNet-18 can use);
3. exports INT8 ONNX (static QDQ, calibrated on the run's own images) and verifies it against PyTorch;
4. prints the accuracy, the export check and where the run is.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def main() -> int:
    """Run the demo; returns the process exit code."""
    from twinkle_core import Trainer, list_algorithms
    from twinkle_vision.samples import write_digits

    print(f"Algorithms installed: {', '.join(list_algorithms())}\n")
    data = Path(os.environ.get("TWINKLE_DEMO_DATA", ".cache/demo")) / "digits"
    if not data.exists():
        write_digits(data)

    trainer = Trainer(
        algorithm="resnet18",
        task="image_classification",
        hyperparams={"max_epochs": 10, "use_mmap": True},
        project="demo",
    )
    result = trainer.fit(data=str(data))
    export = trainer.export(format="onnx", quantize=True)

    print()
    print(f"Validation accuracy (best): {result.best_metric:.4f}")
    print(f"INT8 ONNX: {export.path} ({export.size_bytes / 1e6:.1f} MB, {export.details['quantization']})")
    print(f"  accuracy PyTorch {export.metric_torch:.4f} vs ONNX INT8 {export.metric_export:.4f} "
          f"on {export.samples} validation images; max |logit difference| {export.max_abs_diff:.3g}")
    home = os.path.abspath(trainer.store.home)
    twinkle = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "twinkle")
    print(f"Run: {result.run_uri}  (store: {home})")
    print(f"Run folder: {result.run_dir}  (plan.json, logs/metrics.csv, curves.png, checkpoints/, exports/)")
    print(f"See it again (from any shell): TWINKLE_HOME={shlex.quote(home)} {shlex.quote(twinkle)} runs show {result.run_uri}")
    return 0 if result.best_metric >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
