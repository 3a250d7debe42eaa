"""What the exact-resume scripts (``train_sft.py``, ``train_rl.py``) share: ``python SCRIPT full DATA BASE`` trains
without interruption; ``kill DATA BASE STEP`` is SIGKILLed before optimizer step STEP; ``resume DATA BASE RUN``
resumes RUN. Each prints ``RUN {"run_uri", "last_checkpoint"}``."""

import json
import sys
from typing import Any

from twinkle_core import Trainer
from twinkle_core.testing import KillAtStep


def train(task: str, hyperparams: dict[str, Any]) -> None:
    """Run the mode ``sys.argv`` names for a ``task`` run with ``hyperparams`` (``weights`` is the BASE given)."""
    mode, data, base = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "resume":
        result = Trainer.from_checkpoint(sys.argv[4], mode="resume", verbose=False).fit()
    else:
        callbacks = [KillAtStep(int(sys.argv[4]))] if mode == "kill" else []
        result = Trainer("llm-tiny", task=task, hyperparams={**hyperparams, "weights": base}, project=mode,
                         verbose=False, callbacks=callbacks).fit(data)
    print("RUN " + json.dumps({"run_uri": result.run_uri, "last_checkpoint": result.last_checkpoint}))
