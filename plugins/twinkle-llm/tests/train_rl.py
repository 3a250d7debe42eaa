"""A LoRA reinforcement-learning run in a process of its own, for the exact-resume test.

``python train_rl.py full DATA BASE`` trains without interruption; ``kill DATA BASE STEP`` is SIGKILLed before
optimizer step STEP; ``resume DATA BASE RUN`` resumes RUN. It prints ``RUN {"run_uri", "last_checkpoint"}``.
"""

import json
import sys

from twinkle_core import Trainer
from twinkle_core.testing import KillAtStep

mode, data, base = sys.argv[1], sys.argv[2], sys.argv[3]
# 2 epochs of 3 steps (11 training prompts, 4 per batch), groups of 4 sampled completions, a checkpoint every 2 steps
hp = {"weights": base, "lora_rank": 4, "lr": 1e-2, "max_epochs": 2, "batch_size": 4, "group_size": 4,
      "max_new_tokens": 8, "rewards": [{"name": "format", "pattern": "7", "search": True}],
      "checkpoint_every_n_steps": 2, "progress_bar": False}
if mode == "resume":
    result = Trainer.from_checkpoint(sys.argv[4], mode="resume", verbose=False).fit()
else:
    callbacks = [KillAtStep(int(sys.argv[4]))] if mode == "kill" else []
    result = Trainer("llm-tiny", task="reinforcement_learning", hyperparams=hp, project=mode, verbose=False,
                     callbacks=callbacks).fit(data)
print("RUN " + json.dumps({"run_uri": result.run_uri, "last_checkpoint": result.last_checkpoint}))
