"""twinkle-vision's journey from its wheel: list, train ResNet-18 for an epoch on 400 of the bundled digits, export
ONNX, continue for another (a smoke test of the installed wheel: how well ResNet-18 learns is the plugin's own
suite's job)."""

from __future__ import annotations

import sys
from pathlib import Path

from common import continued, start


def main(work: Path) -> None:
    """Run the journey in ``work`` (its data and run store)."""
    start("vision", "twinkle_vision")
    from twinkle_core import Trainer
    from twinkle_vision.samples import write_digits

    data = write_digits(work / "digits")
    for digit in data.iterdir():  # 40 images a class: enough for a smoke test of the wheel, a fifth of the steps
        for image in sorted(digit.iterdir())[40:]:
            image.unlink()
    trainer = Trainer("resnet18", hyperparams={"max_epochs": 1, "batch_size": 64}, home=str(work / "home"),
                      progress_bar=False)
    result = trainer.fit(data=str(data))
    assert result.status == "finished", result.status
    exported = trainer.export(format="onnx")
    print(f"exported: {exported.path} max |diff| {exported.max_abs_diff:.2g}")
    child = continued(result.run_uri, work, max_epochs=2)
    print(f"trained {result.run_uri} (val accuracy {result.best_metric:.3f}), continued as {child} "
          f"")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
