"""A MelOTTS training run in a process of its own, for the reference runs and the exact-resume tests.

``python train_voice.py full CORPUS VOCODER`` trains without interruption; ``kill CORPUS STEP VOCODER`` is SIGKILLed
before optimizer step STEP; ``resume CORPUS RUN VOCODER`` resumes RUN. It prints ``RUN {"run_uri", "last_checkpoint"}``.
"""

import json
import sys

from twinkle_core import Trainer
from twinkle_core.testing import KillAtStep

mode, data, vocoder = sys.argv[1], sys.argv[2], sys.argv[-1]
# griffin-lim: 4 epochs of 3 steps; hifigan (a GAN step costs more): 2 epochs of 3 steps, with two discriminator
# periods instead of VITS's five (the same mechanics at a third of the cost and checkpoint size)
hp = {"batch_size": 4, "max_epochs": 4 if vocoder == "griffin-lim" else 2, "checkpoint_every_n_steps": 2,
      "lang": "en", "sample_rate": 16000, "progress_bar": False, "vocoder": vocoder}
if vocoder == "hifigan":
    hp["discriminator_periods"] = (2, 3)
if mode == "resume":
    result = Trainer.from_checkpoint(sys.argv[3], mode="resume", verbose=False).fit()
else:
    callbacks = [KillAtStep(int(sys.argv[3]))] if mode == "kill" else []
    result = Trainer("melotts", hyperparams=hp, project=mode, verbose=False, callbacks=callbacks).fit(data)
print("RUN " + json.dumps({"run_uri": result.run_uri, "last_checkpoint": result.last_checkpoint}))
