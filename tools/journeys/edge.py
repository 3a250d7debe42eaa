"""twinkle-edge's journey from its wheel: list, train core's tabular MLP, export INT8 ONNX and RKNN (in rknn's
simulator) with the plugin's exporters, continue."""

from __future__ import annotations

import sys
from pathlib import Path

from common import continued, start


def main(work: Path) -> None:
    """Run the journey in ``work`` (its data and run store)."""
    start("edge", "twinkle_edge")
    import numpy as np
    import pandas as pd

    from twinkle_core import Trainer, list_exporters

    assert {"rknn", "onnx-int8"} <= set(list_exporters()), list_exporters()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 6)).astype("float32")
    table = pd.DataFrame(x, columns=[f"f{i}" for i in range(6)]).assign(label=(x[:, 0] + x[:, 1] > 0).astype(int))
    table.to_csv(work / "points.csv", index=False)
    trainer = Trainer("tabular-mlp", task="tabular_classification", hyperparams={"max_epochs": 3},
                      home=str(work / "home"), progress_bar=False)
    result = trainer.fit(data=str(work / "points.csv"))
    assert result.status == "finished", result.status
    for target in ("onnx-int8", "rknn"):
        exported = trainer.export(format=target)
        print(f"exported {target}: {exported.path} ({exported.size_bytes} bytes, cosine {exported.cosine})")
    child = continued(result.run_uri, work, max_epochs=4)
    print(f"trained {result.run_uri} (val accuracy {result.best_metric:.3f}), continued as {child}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
