"""The ``reinforcement_learning`` task (GRPO): a model samples groups of completions per prompt, rewards score them,
and the policy gradient raises the rewards — logged with their spread, KL, clip fraction, completion length and
entropy; its settings and data are checked before anything trains."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from twinkle_core import RunStore, Trainer
from twinkle_core.data import MissingColumnError
from twinkle_core.errors import HyperparameterError, UnknownComponentError
from twinkle_core.rewards import RewardError

SEVEN = {"name": "format", "pattern": "7", "search": True}
"""A verifiable reward a random model earns now and then: 1 when the completion writes a 7 anywhere."""


def _prompts(folder: Path, count: int = 40) -> Path:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Spell {100 + i}", "answer": str(100 + i)[::-1]}) + "\n"
                            for i in range(count)))
    return path


def test_grpo_raises_a_verifiable_reward_and_logs_what_rl_runs_watch(small_base: Path, tmp_path: Path) -> None:
    """On a random small Llama (``small_base``) whose sampled completions hold a 7 about a third of the time, four
    epochs of GRPO (groups of 8, 36 prompts) raise the mean reward of the sampled completions by at least 0.3, to
    0.8 or more, and the greedy answers of the held-out prompts earn it; every step logs the reward and its
    within-group spread, KL, clip fraction, completion length and entropy; its ``hf`` export gives the trained
    model's logits on the held-out prompts."""
    trainer = Trainer("llm-tiny", task="reinforcement_learning", home=str(tmp_path / "home"), verbose=False,
                      progress_bar=False,
                      hyperparams={"weights": str(small_base), "rewards": [SEVEN], "group_size": 8,
                                   "max_new_tokens": 16, "max_epochs": 4, "batch_size": 4, "lr": 1e-2})
    result = trainer.fit(str(_prompts(tmp_path)))
    assert result.status == "finished" and result.monitor == "val_reward"
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    rewards = metrics["train_reward_epoch"].dropna().tolist()
    print("reward by epoch", rewards, "held out", metrics["val_reward"].dropna().tolist())
    assert len(rewards) == 4 and rewards[-1] >= rewards[0] + 0.3 and rewards[-1] >= 0.8, rewards
    assert metrics["val_reward"].dropna().iloc[-1] >= 0.5 and result.best_metric >= 0.5
    for column in ("train_reward_std_step", "train_kl_step", "train_clip_fraction_step",
                   "train_completion_length_step", "train_entropy_step", "train_reward_format_step"):
        assert metrics[column].notna().any(), column
    assert metrics["train_clip_fraction_step"].dropna().max() == 0.0  # one update per rollout: the ratio is 1
    exported = trainer.export(format="hf", output=str(tmp_path / "rl-hf"))  # verified on the held-out prompts
    assert exported.max_abs_diff <= 1e-4 and exported.metric_export == exported.metric_torch


@pytest.mark.parametrize(("hyperparams", "error", "message"), [
    ({}, HyperparameterError, "needs rewards="),
    ({"rewards": "no-such-reward"}, UnknownComponentError, "no-such-reward"),
    ({"rewards": [SEVEN], "group_size": 1}, HyperparameterError, "'group_size' = 1 must be at least 2"),
    ({"rewards": [SEVEN], "clip_low": 1.0}, HyperparameterError, "'clip_low' = 1.0"),
    ({"rewards": [{"name": "format", "pattern": "(("}]}, RewardError, "not a regular expression"),
    ({"rewards": [SEVEN], "weights": None}, HyperparameterError, "samples from a trained model"),
])
def test_reinforcement_learning_settings_are_checked_before_any_run_is_made(small_base: Path, tmp_path: Path,
                                                                           hyperparams: dict, error: type,
                                                                           message: str) -> None:
    """No rewards, an unregistered one, a group of one, a clipping bound that leaves no ratio, a reward that
    cannot be built and no model to sample from are named errors of ``fit`` — before any run is created."""
    home = tmp_path / "home"
    values = {"weights": str(small_base), "max_epochs": 1, **hyperparams}
    with pytest.raises(error, match=message):
        Trainer("llm-tiny", task="reinforcement_learning", home=str(home), verbose=False,
                hyperparams={k: v for k, v in values.items() if v is not None}).fit(str(_prompts(tmp_path, 4)))
    assert RunStore(str(home)).list() == []


def test_rl_settings_on_another_task_and_prompts_without_a_prompt_are_named(small_base: Path, tmp_path: Path) -> None:
    """Rewards given to a pre-training run are refused (they would do nothing), and a prompt file whose records
    lack ``prompt`` is a ``MissingColumnError`` naming the file and line."""
    text = tmp_path / "text.jsonl"
    text.write_text("".join(json.dumps({"text": f"Spell {100 + i} backwards"}) + "\n" for i in range(8)))
    with pytest.raises(HyperparameterError, match="configure reinforcement learning, but the task is 'causal_lm'"):
        Trainer("llm-tiny", hyperparams={"rewards": [SEVEN], "max_epochs": 1}, home=str(tmp_path / "home"),
                verbose=False).fit(str(text))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "Spell 101"}) + "\n" + json.dumps({"question": "Spell 102"}) + "\n")
    trainer = Trainer("llm-tiny", task="reinforcement_learning", home=str(tmp_path / "home"), verbose=False,
                      hyperparams={"weights": str(small_base), "rewards": [SEVEN], "max_epochs": 1})
    with pytest.raises(MissingColumnError, match=r"bad\.jsonl, line 2: no field 'prompt'"):
        trainer.fit(str(bad))
    assert RunStore(str(tmp_path / "home")).list() == []
