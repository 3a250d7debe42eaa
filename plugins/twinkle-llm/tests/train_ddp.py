"""llm-tiny on two CPU processes (DDP over gloo), for ``test_two_processes.py``.

``python train_ddp.py DATA OUT`` pre-trains for two epochs; ``python train_ddp.py DATA OUT BASE`` trains GRPO on the
prompts DATA from the model folder BASE (each rank samples and scores its own prompts' groups). Each rank writes
``OUT/rank<N>.json`` with what its fit returned. Lightning starts the second rank by running this script again.
"""

import json
import os
import sys
from pathlib import Path

from twinkle_core import Trainer

if __name__ == "__main__":
    data, out = sys.argv[1], Path(sys.argv[2])
    hp = {"devices": 2, "accelerator": "cpu", "max_epochs": 2, "max_seq_len": 64, "vocab_size": 512, "batch_size": 8,
          "lr": 3e-3, "progress_bar": False}
    task = "causal_lm"
    if len(sys.argv) > 3:  # reinforcement learning from BASE: groups of 4, a reward for writing a 7
        task = "reinforcement_learning"
        hp = {"devices": 2, "accelerator": "cpu", "max_epochs": 2, "batch_size": 4, "lr": 1e-2, "weights": sys.argv[3],
              "rewards": [{"name": "format", "pattern": "7", "search": True}], "group_size": 4, "max_new_tokens": 8,
              "progress_bar": False}
    result = Trainer("llm-tiny", task=task, hyperparams=hp, verbose=False).fit(data)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    (out / f"rank{rank}.json").write_text(json.dumps({
        "run_uri": result.run_uri, "metrics": result.metrics, "best_metric": result.best_metric,
        "best_checkpoint": result.best_checkpoint, "strategy": result.plan.strategy}))
