"""The export side of the ONNX-only journey, in a venv with core's wheel (and torch): train tabular-mlp on a
generated table, export it to ONNX, and predict the same rows from the run (the reference the file must match).

``python onnx_export.py WORK`` writes ``WORK/model.onnx``, ``WORK/rows.csv`` (the features only) and ``WORK/run.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import assert_installed_from_wheels


def main(work: Path) -> None:
    """Train, export and predict in ``work``."""
    assert_installed_from_wheels()
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
    print(f"trained {result.run_uri} (val accuracy {result.best_metric:.3f}), exported {exported.path}, "
          f"predicted {predicted.count} rows from the run")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
