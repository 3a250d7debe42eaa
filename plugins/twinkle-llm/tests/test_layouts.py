"""llm-tiny split over two CPU processes (tensor parallel over gloo, in Lightning's ModelParallelStrategy) trains
exactly as one process does, and its checkpoints move between layouts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from twinkle_core import Trainer
from twinkle_core.testing import run_script

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # two training processes

SCRIPT = Path(__file__).with_name("train_layout.py")


def _train(data: Path, out: Path, home: Path, devices: int, tensor: int, parent: str | None = None) -> list[dict]:
    """Run ``train_layout.py`` in ``out`` (its store ``home``); every rank's JSON."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    done = run_script([str(SCRIPT), str(data), str(out), str(devices), str(tensor), *([parent] if parent else [])],
                      env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(devices)]


def _weights(run: str, home: Path) -> dict[str, torch.Tensor]:
    model, *_ = Trainer.from_checkpoint(run, mode="finetune", home=str(home), verbose=False).model_for_export()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_tensor_parallel_on_two_processes_trains_as_one_process_does_and_its_checkpoints_change_layout(
        topics: Path, tmp_path: Path) -> None:
    """tp 2 (sequence-parallel norms, vocabulary-split embedding and head, tied weights kept tied): the first ten
    losses equal one process's within 1e-4 relative (fp32, the same seed and batches) and the final weights —
    gathered into one checkpoint — within Adam's rounding; the plan records dp 1 × tp 2. Each run's checkpoint
    then continues in the other layout: the tp-2 run in one process, the one-process run split over two."""
    data = tmp_path / "topics-40.jsonl"
    data.write_text("".join(topics.read_text().splitlines(keepends=True)[:40]))
    one_home, split_home = tmp_path / "one", tmp_path / "split"
    (one,) = _train(data, tmp_path / "out-one", one_home, 1, 1)
    split = _train(data, tmp_path / "out-tp2", split_home, 2, 2)
    assert split[0]["strategy"] == "fsdp2" and split[0]["layout"]["layout"].startswith("dp 1 × tp 2 × pp 1")
    assert len(one["losses"]) == 10
    for rank in split:  # both ranks of the tensor-parallel pair saw the same batches, so the same losses
        assert rank["losses"] == pytest.approx(one["losses"], rel=1e-4)
    assert one["losses"][-1] < one["losses"][0]
    plan = json.loads((split_home / "runs" / "tester" / "default" / "run1" / "plan.json").read_text())
    assert plan["strategy"] == "fsdp2" and plan["estimates"]["layout"]["tensor"] == 2

    single, shared = _weights(one["run_uri"], one_home), _weights(split[0]["run_uri"], split_home)
    assert single.keys() == shared.keys()
    for name in single:  # Adam normalises each update, so last-bit gradient differences move a weight by ~1e-5
        torch.testing.assert_close(shared[name], single[name], rtol=0, atol=5e-4, msg=name)

    onward = Trainer.from_checkpoint(split[0]["run_uri"], home=str(split_home), verbose=False, progress_bar=False,
                                     hyperparams={"devices": 1, "tensor_parallel_size": 1, "max_steps": 14}).fit()
    assert onward.status == "finished" and onward.plan.strategy != "fsdp2"
    assert onward.metrics["train_loss"] < one["losses"][4]  # it starts from the trained weights, not afresh
    (again, _) = _train(data, tmp_path / "out-onward", one_home, 2, 2, parent=one["run_uri"])
    assert again["status"] == "finished" and again["layout"]["tensor"] == 2
    assert again["losses"][0] < one["losses"][4]  # the one-process weights and Adam state, split over two
