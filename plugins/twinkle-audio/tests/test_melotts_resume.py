"""A MelOTTS run killed with SIGKILL mid-epoch and resumed ends with the same weights as one never interrupted
(speaking at each validation draws from its own generator, so it leaves training's random state alone) — with
the spectrogram decoder, and with HiFi-GAN, whose generator and discriminator step their own optimizers.

The uninterrupted run is the session's reference run of that vocoder (``conftest.py``), trained by the same
script in a process of its own; this test kills and resumes a second run of it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("vocoder", "kill_at", "steps"), [("griffin-lim", 7, 12), ("hifigan", 4, 6)])
def test_sigkill_then_resume_ends_with_the_same_weights(request, tmp_path, voice_runs, vocoder, kill_at,
                                                        steps) -> None:
    reference = request.getfixturevalue(f"{vocoder.replace('-', '_')}_reference")
    corpus = Path(reference["corpus"])
    # griffin-lim: 4 epochs of 3 steps, killed in epoch 2 after the step-6 checkpoint; hifigan: 2 epochs of 3
    # steps, killed in epoch 1 after the step-4 checkpoint
    killed = voice_runs.train(tmp_path, "kill", corpus, str(kill_at), vocoder)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    store = RunStore(str(tmp_path / "home"))
    (victim,) = store.list(project="kill")
    assert victim.status == "running"  # nothing could mark it
    resumed_run = voice_runs.last_run(voice_runs.train(tmp_path, "resume", corpus, victim.uri, vocoder))
    full = torch.load(reference["last_checkpoint"], weights_only=True)
    resumed = torch.load(resumed_run["last_checkpoint"], weights_only=True)
    assert full["global_step"] == resumed["global_step"] == steps
    assert full["state_dict"].keys() == resumed["state_dict"].keys()
    assert len(full["optimizer_states"]) == (3 if vocoder == "hifigan" else 1)
    assert any(key.startswith("discriminator.") for key in full["state_dict"]) == (vocoder == "hifigan")
    for key, value in full["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    assert store.get(resumed_run["run_uri"]).status == "finished" and store.get(victim.uri).status == "interrupted"
