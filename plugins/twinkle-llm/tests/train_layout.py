"""llm-tiny for ten steps in a given layout, for ``test_layouts.py``.

``python train_layout.py DATA OUT DEVICES TENSOR_PARALLEL [RUN]`` trains ten optimizer steps (fp32, seed 0, the
same batches in every layout) — or, given ``RUN``, continues that run as a new run of 14 steps — and writes
``OUT/rank<N>.json``: the run, its plan's layout and the loss of every step this rank saw. With more than one
device Lightning starts the other ranks by running this script again.
"""

import json
import os
import sys
from pathlib import Path

import lightning as L

from twinkle_core import Trainer


class StepLosses(L.Callback):
    """The training loss of every optimizer step (this rank's; with tensor parallel every rank of a group
    computes the same one)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        self.losses.append(float(outputs["loss"]))


if __name__ == "__main__":
    data, out, devices, tensor = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    parent = sys.argv[5] if len(sys.argv) > 5 else None
    hp = {"accelerator": "cpu", "devices": devices, "max_steps": 10, "max_epochs": 1, "max_seq_len": 64,
          "vocab_size": 512, "batch_size": 4, "effective_batch_size": 4, "lr": 3e-3, "scheduler": "none",
          "val_generations": 0, "progress_bar": False}
    hp["tensor_parallel_size"] = tensor
    losses = StepLosses()
    if parent:
        more = {"devices": devices, "tensor_parallel_size": tensor, "max_steps": 14, "accelerator": "cpu"}
        result = Trainer.from_checkpoint(parent, hyperparams=more, verbose=False, callbacks=[losses]).fit(data)
    else:
        result = Trainer("llm-tiny", hyperparams=hp, verbose=False, callbacks=[losses]).fit(data)
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    (out / f"rank{rank}.json").write_text(json.dumps({
        "run_uri": result.run_uri, "losses": losses.losses, "strategy": result.plan.strategy,
        "layout": result.plan.estimates.get("layout"), "status": result.status}))
