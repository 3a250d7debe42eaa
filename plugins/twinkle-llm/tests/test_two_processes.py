"""llm-tiny on two processes (DDP over gloo) is one run: the same result on both ranks, a validation perplexity
over every rank's windows (what one process computes on the whole validation split with the best checkpoint),
and held-out generations that both ranks make together and rank 0 writes once per validation. Reinforcement
learning splits its prompts over the ranks, each rank sampling and scoring whole groups, and reduces its figures:
the held-out reward is the mean over every rank's prompts, what one process finds on them."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.testing import run_script

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # two training processes


def test_two_processes_make_one_run_with_a_whole_validation_and_one_set_of_generations(topics: Path,
                                                                                        tmp_path: Path) -> None:
    data = tmp_path / "topics-24.jsonl"
    data.write_text("".join(topics.read_text().splitlines(keepends=True)[:24]))
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    done = run_script([str(Path(__file__).with_name("train_ddp.py")), str(data), str(tmp_path)], env=env,
                      timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["strategy"] == "ddp" and ranks[0] == ranks[1]  # one result, on every rank
    (run,) = RunStore(str(home)).list()
    assert run.uri == ranks[0]["run_uri"] and run.status == "finished"

    written = sorted((home / "runs" / "tester" / "default" / run.uri.rsplit("/", 1)[1] / "generations").glob("*"))
    assert len(written) == 2  # one file per validation, written once
    assert all(len(path.read_text().splitlines()) == 2 for path in written)

    model, prepared, _, _ = Trainer.from_checkpoint(run.uri, mode="finetune", home=str(home),
                                                    verbose=False).model_for_export()
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for ids, labels, positions in torch.utils.data.DataLoader(prepared.val, batch_size=16):
            logits = model(ids, positions)[:, :-1]
            targets = labels[:, 1:]
            total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                                             ignore_index=-100, reduction="sum"))
            count += float((targets != -100).sum())
    assert ranks[0]["best_metric"] == pytest.approx(total / count, rel=1e-4)  # val_loss over the whole split
    assert ranks[0]["metrics"]["val_perplexity"] == pytest.approx(math.exp(ranks[0]["metrics"]["val_loss"]), rel=1e-4)


def test_two_processes_split_rl_prompts_and_reduce_the_reward_over_all_of_them(small_base: Path,
                                                                                 tmp_path: Path) -> None:
    """GRPO on two processes (24 prompts, a tenth held out; 4 a step on each rank): one run, the same figures on
    both ranks; the plan counts the optimizer steps over both ranks' prompts (8 a step); the validation reward of
    the best checkpoint is what one process scores the held-out prompts' greedy answers."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Spell {100 + i}"}) + "\n" for i in range(24)))
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    done = run_script([str(Path(__file__).with_name("train_ddp.py")), str(prompts), str(tmp_path), str(small_base)],
                      env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["strategy"] == "ddp" and ranks[0] == ranks[1]  # one result, on every rank
    assert {"val_reward", "train_reward_epoch", "train_reward_std_epoch"} <= set(ranks[0]["metrics"])
    (run,) = RunStore(str(home)).list()
    plan = json.loads((home / "runs" / "tester" / "default" / run.uri.rsplit("/", 1)[1] / "plan.json").read_text())
    trainer = Trainer.from_checkpoint(run.uri, mode="finetune", home=str(home), verbose=False)
    _, prepared, _, _ = trainer.model_for_export()
    assert len(prepared.val) >= 2 and plan["estimates"]["optimizer_steps_per_epoch"] == math.ceil(len(prepared.train) / 8)
    held_out = tmp_path / "held-out.jsonl"
    held_out.write_text("".join(json.dumps(row) + "\n" for _, row in prepared.val.items))
    again = trainer.evaluate(str(held_out))  # one process, greedy answers to the same two prompts
    assert 0 < again.metrics["reward"] < 1  # the held-out answers earn different rewards: no rank alone has the mean
    assert ranks[0]["best_metric"] == pytest.approx(again.metrics["reward"], abs=1e-6)
