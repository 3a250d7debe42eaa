"""A LoRA instruction-tuning run killed with SIGKILL mid-epoch and resumed ends with adapters bit-identical to a
run never interrupted (adapter dropout draws from the resumed random state), and its checkpoints hold the
adapters alone, with their optimizer state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore
from twinkle_core.testing import run_script

pytestmark = pytest.mark.slow

TRAIN_SFT = Path(__file__).with_name("train_sft.py")


def _train(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    return run_script([str(TRAIN_SFT), *args], env=env, timeout=900, preload=["twinkle_llm.model", "peft"])


def _run(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("RUN ")][-1][4:])


def test_a_lora_run_killed_mid_epoch_resumes_to_identical_adapters(small_base: Path, tmp_path: Path) -> None:
    pairs = [(f"Spell {n} backwards", str(n)[::-1]) for n in range(100, 127)]  # 27: 24 train, 3 held out
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs))
    base = str(small_base)
    home = tmp_path / "home"
    full = _run(_train(home, "full", str(data), base))
    killed = _train(home, "kill", str(data), base, "5")  # in epoch 2, after the step-4 checkpoint
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    store = RunStore(str(home))
    (victim,) = store.list(project="kill")
    assert victim.status == "running"  # nothing could mark it
    resumed = _run(_train(home, "resume", str(data), base, victim.uri))
    reference = torch.load(full["last_checkpoint"], weights_only=True)
    again = torch.load(resumed["last_checkpoint"], weights_only=True)
    assert reference["global_step"] == again["global_step"] == 9
    assert reference["state_dict"].keys() == again["state_dict"].keys()
    assert reference["state_dict"] and all(".lora_" in key for key in reference["state_dict"])  # adapters alone
    for key, value in reference["state_dict"].items():
        assert torch.equal(value, again["state_dict"][key]), key
    moments = reference["optimizer_states"][0]["state"]
    assert len(moments) == len(reference["state_dict"])  # Adam's moments of the adapters, nothing of the base
    assert store.get(resumed["run_uri"]).status == "finished" and store.get(victim.uri).status == "interrupted"
