"""llm-tiny pre-trained on two CPU processes (DDP over gloo), for ``test_two_processes.py``.

``python train_ddp.py DATA OUT`` trains for two epochs; each rank writes ``OUT/rank<N>.json`` with what its fit
returned. Lightning starts the second rank by running this script again.
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
    result = Trainer("llm-tiny", hyperparams=hp, verbose=False).fit(data)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    (out / f"rank{rank}.json").write_text(json.dumps({
        "run_uri": result.run_uri, "metrics": result.metrics, "best_metric": result.best_metric,
        "best_checkpoint": result.best_checkpoint, "strategy": result.plan.strategy}))
