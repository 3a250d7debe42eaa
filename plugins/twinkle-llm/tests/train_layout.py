"""llm-tiny for ten steps in a given layout, for ``test_layouts.py``.

``python train_layout.py MODE DATA OUT DEVICES TP[,PP[,ACC]] STRATEGY [ARG]`` (the tensor-parallel size, the
pipeline stages, and the batches each optimizer step accumulates; STRATEGY: ``auto`` or ``fsdp2``)
with MODE

* ``fresh``: ten optimizer steps (fp32, seed 0, the same four windows per step in every layout — split between
  the data-parallel replicas — and a checkpoint every four);
* ``kill``: the same, SIGKILLed (every rank) before optimizer step ARG;
* ``resume``: resumes run ARG to its end;
* ``continue``: continues run ARG as a new run of 14 steps;

then writes ``OUT/rank<N>.json``: the run, its plan's layout, its last checkpoint and the loss of every step this
rank saw (and whether ``lm_head``'s logits came split by vocabulary). With more than one device Lightning starts the other ranks by running this script again.
"""

import json
import os
import sys
from pathlib import Path

import lightning as L
import torch

from twinkle_core import Trainer
from twinkle_core.testing import KillAtStep


class StepLosses(L.Callback):
    """The loss of every optimizer step over the whole batch: the mean of the ranks' (every replica's windows
    hold as many tokens, and the ranks of a tensor-parallel group compute the same loss), summed over the batches
    the step accumulates (each holds as many tokens)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.accumulating = False

    def on_train_start(self, trainer, module) -> None:  # noqa: ANN001
        self.split_logits = None
        head = module.model.get_output_embeddings()
        head.register_forward_hook(lambda mod, args, out: setattr(self, "split_logits", type(out).__name__ == "DTensor"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        loss = outputs["loss"].detach().clone()  # Lightning's: divided by the batches a step accumulates
        if trainer.world_size > 1:
            torch.distributed.all_reduce(loss)
            loss /= trainer.world_size
        if self.accumulating:
            self.losses[-1] += float(loss)
        else:
            self.losses.append(float(loss))
        self.accumulating = (batch_idx + 1) % trainer.accumulate_grad_batches != 0  # the step's batches add up


if __name__ == "__main__":
    mode, data, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    devices, strategy = int(sys.argv[4]), sys.argv[6]
    tensor, stages, accumulate = (int(v) for v in (sys.argv[5] + ",1,1").split(",")[:3])
    arg = sys.argv[7] if len(sys.argv) > 7 else None
    hp = {"accelerator": "cpu", "devices": devices, "tensor_parallel_size": tensor, "pipeline_parallel_size": stages,
          "max_steps": 10, "max_epochs": 1, "max_seq_len": 64, "vocab_size": 512,
          "batch_size": 4 // (devices // (tensor * stages)) // accumulate, "effective_batch_size": 4,
          "lr": 3e-3, "scheduler": "none", "val_generations": 0, "checkpoint_every_n_steps": 4, "progress_bar": False}
    if strategy != "auto":
        hp["strategy"] = strategy
    losses = StepLosses()
    if mode == "resume":
        result = Trainer.from_checkpoint(arg, mode="resume", verbose=False, callbacks=[losses]).fit()
    elif mode == "continue":
        more = {"devices": devices, "tensor_parallel_size": tensor, "pipeline_parallel_size": stages, "max_steps": 14,
                "accelerator": "cpu"}
        result = Trainer.from_checkpoint(arg, hyperparams=more, verbose=False, callbacks=[losses]).fit(data)
    else:
        callbacks = [losses] + ([KillAtStep(int(arg))] if mode == "kill" else [])
        result = Trainer("llm-tiny", hyperparams=hp, project=mode, verbose=False, callbacks=callbacks).fit(data)
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
    (out / f"rank{rank}.json").write_text(json.dumps({
        "run_uri": result.run_uri, "losses": losses.losses, "strategy": result.plan.strategy,
        "layout": result.plan.estimates.get("layout"), "status": result.status,
        "last_checkpoint": result.last_checkpoint, "split_logits": getattr(losses, "split_logits", None)}))
