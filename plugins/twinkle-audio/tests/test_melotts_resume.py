"""A MelOTTS run killed with SIGKILL mid-epoch and resumed ends with the same weights as one never interrupted
(speaking at each validation draws from its own generator, so it leaves training's random state alone) — with
the spectrogram decoder, and with HiFi-GAN, whose generator and discriminator step their own optimizers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    '''
    import sys
    from twinkle_core import Trainer
    from twinkle_core.testing import KillAtStep

    mode, data, vocoder = sys.argv[1], sys.argv[2], sys.argv[-1]
    hp = {"batch_size": 4, "max_epochs": 4 if vocoder == "griffin-lim" else 2, "checkpoint_every_n_steps": 2,
          "lang": "en", "sample_rate": 16000, "progress_bar": False, "vocoder": vocoder}
    if mode == "resume":
        result = Trainer.from_checkpoint(sys.argv[3], mode="resume", verbose=False).fit()
    else:
        callbacks = [KillAtStep(int(sys.argv[3]))] if mode == "kill" else []
        result = Trainer("melotts", hyperparams=hp, project=mode, verbose=False, callbacks=callbacks).fit(data)
    print("RUN", result.run_uri, result.last_checkpoint)
    '''
)


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})


def _last_line(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line.startswith("RUN ")][-1].split()


@pytest.mark.parametrize(("vocoder", "kill_at", "steps"), [("griffin-lim", 7, 12), ("hifigan", 4, 6)])
def test_sigkill_then_resume_ends_with_the_same_weights(tmp_path, monkeypatch, vocoder, kill_at, steps) -> None:
    from twinkle_audio.samples import write_espeak_corpus

    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TWINKLE_USER", "tester")
    corpus = write_espeak_corpus(tmp_path / "en", "en", count=12, rate=16000)  # 11 training clips: 3 batches/epoch
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    _, _, full_ckpt = _last_line(_run(script, "full", str(corpus), vocoder))
    # griffin-lim: 4 epochs of 3 steps, killed in epoch 2 after the step-6 checkpoint; hifigan (a GAN step costs
    # more): 2 epochs of 3 steps, killed in epoch 1 after the step-4 checkpoint
    killed = _run(script, "kill", str(corpus), str(kill_at), vocoder)
    assert killed.returncode == -signal.SIGKILL
    store = RunStore()
    (victim,) = store.list(project="kill")
    assert victim.status == "running"  # nothing could mark it
    _, resumed_uri, resumed_ckpt = _last_line(_run(script, "resume", str(corpus), victim.uri, vocoder))
    full = torch.load(full_ckpt, weights_only=True)
    resumed = torch.load(resumed_ckpt, weights_only=True)
    assert full["global_step"] == resumed["global_step"] == steps
    assert full["state_dict"].keys() == resumed["state_dict"].keys()
    assert len(full["optimizer_states"]) == (3 if vocoder == "hifigan" else 1)
    assert any(key.startswith("discriminator.") for key in full["state_dict"]) == (vocoder == "hifigan")
    for key, value in full["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    assert store.get(resumed_uri).status == "finished" and store.get(victim.uri).status == "interrupted"
