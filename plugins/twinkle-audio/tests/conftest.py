"""Fixtures for twinkle-audio's tests: the reference MelOTTS runs that several tests read.

A reference run is trained once per session (across pytest-xdist workers too: ``twinkle_core.testing.once``) by
``train_voice.py`` in a process of its own — the same way the exact-resume tests then kill and resume their runs —
and is read-only afterwards: a test that writes to it (an export) works on a copy.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from twinkle_core.testing import once, run_script

TRAIN_VOICE = Path(__file__).with_name("train_voice.py")
"""The training script the reference runs and the exact-resume tests share (``full``, ``kill``, ``resume``)."""


class VoiceRuns:
    """Runs ``train_voice.py`` in a process of its own and reads what it printed."""

    @staticmethod
    def train(folder: Path, mode: str, corpus: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """``train_voice.py MODE CORPUS ARGS...`` with its run store in ``folder/home``."""
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(folder / "home"),
               "TWINKLE_USER": "tester"}
        # forked from a process that imported the Trainer and the network's layers once (twinkle_core.testing)
        return run_script([str(TRAIN_VOICE), mode, str(corpus), *args], env=env, timeout=900,
                          preload=["twinkle_audio.melotts"])

    @staticmethod
    def last_run(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
        """The run the process printed (``RUN {json}``); fails with its output if it did not finish."""
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return json.loads([line for line in result.stdout.splitlines() if line.startswith("RUN ")][-1][4:])


@pytest.fixture
def voice_runs() -> VoiceRuns:
    """``voice_runs.train(folder, mode, corpus, *args)`` and ``voice_runs.last_run(process)``."""
    return VoiceRuns()


def _reference(tmp_path_factory: pytest.TempPathFactory, vocoder: str) -> dict[str, str]:
    def make(folder: Path) -> None:
        from twinkle_audio.samples import write_espeak_corpus

        corpus = write_espeak_corpus(folder / "en", "en", count=12, rate=16000)  # 11 training clips: 3 batches/epoch
        run = VoiceRuns.last_run(VoiceRuns.train(folder, "full", corpus, vocoder))
        (folder / "run.json").write_text(json.dumps({**run, "corpus": str(corpus), "home": str(folder / "home")}))

    return json.loads((once(tmp_path_factory, f"melotts-{vocoder}-reference", make) / "run.json").read_text())


@pytest.fixture(scope="session")
def hifigan_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A HiFi-GAN MelOTTS trained without interruption: 2 epochs of 3 GAN steps on 12 generated clips (about 40 s,
    two discriminator periods): the run the GAN test inspects and the exact-resume test must end equal to."""
    return _reference(tmp_path_factory, "hifigan")


@pytest.fixture(scope="session")
def griffin_lim_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A spectrogram-decoder MelOTTS trained without interruption: 4 epochs of 3 steps on 12 generated clips."""
    return _reference(tmp_path_factory, "griffin-lim")
