"""The export side of the ONNX-only journey, in a venv with core's and twinkle-vision's wheels (and torch): train
three tiny models — tabular-mlp on a generated table, ResNet-18 on a few of the bundled digits, YOLOv8n on
generated shapes —, export each to ONNX, and predict the same samples from each run (the references the files must
match where only core's wheel, onnxruntime, NumPy and Pillow are installed).

``python onnx_export.py WORK`` writes, in ``WORK``:

* ``model.onnx``, ``rows.csv`` (the features only) and ``run.csv``: the table;
* ``resnet.onnx`` (asked for as ``resnet``: the suffix is added), ``digits/`` (images of two classes, one loose
  RGB JPEG) and ``resnet-run.csv``: the classifier;
* ``yolo.onnx``, ``photos/`` (crops smaller and larger than the run's size, a grey one, an unreadable file) and
  ``yolo-run.jsonl``: the detector.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from common import assert_installed_from_wheels


def table(work: Path) -> str:
    """tabular-mlp on a generated table: exported, and its rows predicted from the run."""
    import numpy as np
    import pandas as pd

    from twinkle_core import Trainer

    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 5))
    frame = pd.DataFrame(features, columns=[f"x{i}" for i in range(5)])
    frame["label"] = np.where(features[:, 0] + 0.5 * features[:, 1] > 0, "up", "down")
    frame.to_csv(work / "table.csv", index=False)
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 5}, home=str(work / "home"), progress_bar=False,
                      verbose=False)
    result = trainer.fit(data=str(work / "table.csv"))
    assert result.status == "finished" and result.best_metric > 0.8, result.metrics
    exported = trainer.export(format="onnx", output=str(work / "model.onnx"))
    frame.drop(columns=["label"]).to_csv(work / "rows.csv", index=False)
    predicted = trainer.predict(data=str(work / "rows.csv"), output=str(work / "run.csv"))
    return (f"table: trained {result.run_uri} (val accuracy {result.best_metric:.3f}), exported {exported.path}, "
            f"predicted {predicted.count} rows from the run")


def classifier(work: Path) -> str:
    """ResNet-18 for an epoch on 30 digits a class: exported as ``resnet`` (written ``resnet.onnx``), and two
    classes' images plus a loose RGB JPEG predicted from the run."""
    from PIL import Image

    from twinkle_core import Trainer
    from twinkle_vision.samples import write_digits

    data = write_digits(work / "all-digits")
    for digit in data.iterdir():
        for image in sorted(digit.iterdir())[30:]:
            image.unlink()
    trainer = Trainer("resnet18", hyperparams={"max_epochs": 1, "batch_size": 64}, home=str(work / "home"),
                      progress_bar=False, verbose=False)
    result = trainer.fit(data=str(data))
    assert result.status == "finished", result.status
    exported = trainer.export(format="onnx", output=str(work / "resnet"))
    assert exported.path == str(work / "resnet.onnx"), exported.path
    held = work / "digits"
    for digit in ("2", "5"):
        shutil.copytree(data / digit, held / digit)
    Image.open(sorted((data / "8").iterdir())[0]).resize((30, 34)).convert("RGB").save(held / "loose.jpg")
    predicted = trainer.predict(data=str(held), output=str(work / "resnet-run.csv"))
    return f"classifier: trained {result.run_uri}, exported {exported.path}, predicted {predicted.count} images"


def detector(work: Path) -> str:
    """YOLOv8n for one epoch on generated shapes at 64 px (boxes kept from confidence 0.001, so an untrained model
    finds some: the comparison is of the export's decoding with the run's, not of accuracy): exported, and crops of
    other sizes predicted from the run."""
    from PIL import Image

    from twinkle_core import Trainer
    from twinkle_vision.samples import write_shapes

    shapes = write_shapes(work / "shapes", train=24, val=8, size=64, seed=2).parent
    trainer = Trainer("yolov8n", hyperparams={"image_size": 64, "batch_size": 8, "max_epochs": 1, "close_mosaic": 1,
                                              "predict_conf": 0.001}, home=str(work / "home"), progress_bar=False,
                      verbose=False)
    result = trainer.fit(data=str(shapes))
    assert result.status == "finished", result.status
    exported = trainer.export(format="onnx", output=str(work / "yolo.onnx"))
    photos = work / "photos"
    photos.mkdir()
    for n, image in enumerate(sorted((shapes / "images" / "val").glob("*.png"))[:6]):
        picture = Image.open(image)
        [picture.crop((0, 0, 50, 36)), picture.resize((100, 80)), picture.convert("L")][n % 3].save(photos / f"{n}.png")
    (photos / "broken.png").write_bytes(b"not an image")
    predicted = trainer.predict(data=str(photos), output=str(work / "yolo-run.jsonl"))
    return f"detector: trained {result.run_uri}, exported {exported.path}, predicted {predicted.count} images"


def main(work: Path) -> None:
    """Train, export and predict the three models in ``work``."""
    assert_installed_from_wheels("twinkle_vision")
    for step in (table, classifier, detector):
        print(step(work), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
