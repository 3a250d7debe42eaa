"""The ``reinforcement_learning`` task (GRPO): a model samples groups of completions per prompt, rewards score them,
and the policy gradient raises the rewards — logged with their spread, KL, clip fraction, completion length and
entropy; its settings and data are checked before anything trains."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.data import MissingColumnError
from twinkle_core.errors import HyperparameterError, TwinkleError, UnknownComponentError
from twinkle_core.rewards import RewardError
from twinkle_core.testing import run_script

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
    within-group spread, KL, clip fraction, completion length and entropy, and alert rules read them (the held-out
    reward passing 0.4 fires; a clip fraction above 0 and completions above 16 tokens do not); the plan explains the
    rollouts, and its speed probe compares bf16 with fp32 on the prompts' own loss (the policy loss depends on what
    each precision sampled), which agree; its
    ``hf`` export gives the trained model's logits on the held-out prompts; ``evaluate`` on new prompts gives the
    greedy answers' reward and pass@8 (one of 8 samples earns the full reward), ``predict`` one answer per prompt
    by its file and line."""
    trainer = Trainer("llm-tiny", task="reinforcement_learning", home=str(tmp_path / "home"), verbose=False,
                      progress_bar=False,
                      hyperparams={"weights": str(small_base), "rewards": [SEVEN], "group_size": 8,
                                   "max_new_tokens": 16, "max_epochs": 4, "batch_size": 4, "lr": 1e-2})
    # alert rules on what RL runs watch: the held-out reward passing 0.4 fires; a clipped ratio (none here) does not
    trainer.monitor(alert_rules={"reward": "> 0.4", "clip_fraction": "> 0", "completion_length": "> 16"})
    result = trainer.fit(str(_prompts(tmp_path)))
    assert {alert["metric"] for alert in result.alerts} == {"val_reward"}, result.alerts
    assert result.status == "finished" and result.monitor == "val_reward"
    rollouts = next(d for d in result.plan.decisions if d.name == "rollouts")  # the plan explains the rollouts
    assert rollouts.value == 32 and "8 completions (group_size) of each of its 4 prompts" in rollouts.reason
    precision = next(d for d in result.plan.decisions if d.name == "precision").reason
    if "bf16-mixed against" in precision:  # a CPU with native bf16 (or a GPU): the probe compared the two
        assert "(more than" not in precision and "not finite" not in precision, precision
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    rewards = metrics["train_reward_epoch"].dropna().tolist()
    print("reward by epoch", rewards, "held out", metrics["val_reward"].dropna().tolist())
    assert len(rewards) == 4 and rewards[-1] >= rewards[0] + 0.3 and rewards[-1] >= 0.8, rewards
    assert metrics["val_reward"].dropna().iloc[-1] >= 0.5 and result.best_metric >= 0.5
    for column in ("train_reward_std_step", "train_kl_step", "train_clip_fraction_step",
                   "train_completion_length_step", "train_entropy_step", "train_reward_format_step"):
        assert metrics[column].notna().any(), column
    assert metrics["train_clip_fraction_step"].dropna().max() == 0.0  # one update per rollout: the ratio is 1
    assert set(metrics["train_ratio_epoch"].dropna()) == {1.0}
    exported = trainer.export(format="hf", output=str(tmp_path / "rl-hf"))  # verified on the held-out prompts
    assert exported.max_abs_diff <= 1e-4 and exported.metric_export == exported.metric_torch
    held_out = tmp_path / "held-out.jsonl"
    held_out.write_text("".join(json.dumps({"prompt": f"Spell {200 + i}"}) + "\n" for i in range(6)))
    evaluation = trainer.evaluate(str(held_out))
    assert set(evaluation.metrics) >= {"reward", "pass_at_8", "reward_format", "completion_length"}
    reward, passed = evaluation.metrics["reward"], evaluation.metrics["pass_at_8"]
    assert 0.5 <= reward <= 1.0 and passed >= 0.8  # sampled completions earn it 8 times in 10 by the end
    written = trainer.predict(str(held_out), str(tmp_path / "answers.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert written.count == 6 and rows[0]["id"] == f"{held_out}:1" and isinstance(rows[0]["text"], str)


@pytest.mark.parametrize(("hyperparams", "error", "message"), [
    ({}, HyperparameterError, "needs rewards="),
    ({"rewards": "no-such-reward"}, UnknownComponentError, "no-such-reward"),
    ({"rewards": [SEVEN], "group_size": 1}, HyperparameterError, "'group_size' = 1 must be at least 2"),
    ({"rewards": [SEVEN], "clip_low": 1.0}, HyperparameterError, "'clip_low' = 1.0"),
    ({"rewards": [{"name": "format", "pattern": "(("}]}, RewardError, "not a regular expression"),
    ({"rewards": [SEVEN], "weights": None}, HyperparameterError, "samples from a trained model"),
    ({"rewards": [SEVEN], "rollout_engine": "vllm"}, HyperparameterError, "rollout_engine='vllm' is not one"),
    ({"rewards": [SEVEN], "updates_per_rollout": 2, "batch_size": 8}, HyperparameterError,
     "makes 2 updates per batch of 8 samples per replica .* has 3 per replica"),
])
def test_reinforcement_learning_settings_are_checked_before_any_run_is_made(small_base: Path, tmp_path: Path,
                                                                           hyperparams: dict, error: type,
                                                                           message: str) -> None:
    """No rewards, an unregistered one, a group of one, a clipping bound that leaves no ratio, a reward that
    cannot be built, no model to sample from, and several updates per rollout with fewer prompts than one rollout
    batch takes (no whole batch to repeat) are named errors of ``fit`` — before any run is created."""
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


def _train_rl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    return run_script([str(Path(__file__).with_name("train_rl.py")), *args], env=env, timeout=900,
                      preload=["twinkle_llm.model", "peft"])


def _printed_run(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("RUN ")][-1][4:])


@pytest.mark.slow
def test_an_rl_run_killed_between_two_updates_of_a_rollout_resumes_to_identical_adapters(small_base: Path,
                                                                                        tmp_path: Path) -> None:
    """Two updates per rollout (``updates_per_rollout=2``; 11 training prompts, 4 a step: 2 whole rollout batches,
    4 steps an epoch, the last 3 prompts left out): the second update of a rollout has a ratio other than 1 (the
    policy moved since it sampled), and the plan says so. SIGKILL before step 4, after the step-3 checkpoint —
    taken between the two updates of the second rollout: resumed, the run trains on that kept rollout again (the
    buffer is in the checkpoint), then samples the same completions (the rollouts' random state is restored) and
    ends with LoRA adapters bit-identical to a run never interrupted. The runs are QLoRA's (``quantize_base="nf4"``):
    the resumed process quantizes the base again to the very values it trained on."""
    data, base, home = str(_prompts(tmp_path, 12)), str(small_base), tmp_path / "home"
    full = _printed_run(_train_rl(home, "full", data, base))
    store = RunStore(str(home))
    record = store.get(full["run_uri"])
    metrics = pd.read_csv(store.path(record.id, "logs", "metrics.csv"))
    # logged every 4th step (the epoch's length): steps 4 and 8, each a rollout's second update
    seconds, epochs = metrics["train_ratio_step"].dropna().tolist(), metrics["train_ratio_epoch"].dropna().tolist()
    assert len(seconds) == len(epochs) == 2 and all(r != 1.0 for r in seconds + epochs), (seconds, epochs)
    plan = json.loads(Path(store.path(record.id, "plan.json")).read_text())
    rollouts = next(d for d in plan["decisions"] if d["name"] == "rollouts")
    assert "each rollout batch trained on 2 times in a row" in rollouts["reason"]
    killed = _train_rl(home, "kill", data, base, "3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (victim,) = store.list(project="kill")
    resumed = _printed_run(_train_rl(home, "resume", data, base, victim.uri))
    reference = torch.load(full["last_checkpoint"], weights_only=True)
    again = torch.load(resumed["last_checkpoint"], weights_only=True)
    assert reference["global_step"] == again["global_step"] == 8
    assert reference["state_dict"] and all(".lora_" in key for key in reference["state_dict"])
    for key, value in reference["state_dict"].items():
        assert torch.equal(value, again["state_dict"][key]), key
    assert store.get(resumed["run_uri"]).status == "finished"
    assert next(d for d in plan["decisions"] if d["name"] == "quantize_base")["value"] == "nf4"


def test_a_reward_from_code_trains_is_recorded_by_name_and_a_failing_one_fails_the_run(small_base: Path,
                                                                                       tmp_path: Path) -> None:
    """A function passed as a reward trains; the run's record and checkpoints keep its name (``code:...``), never
    the code, so a continued run asks for it again by name; a job cannot carry it; a reward that raises mid-run
    fails the run with a ``RewardError`` naming the reward and the prompt."""
    def sevens(completions, rows):
        return [float("7" in text) for text in completions]

    def broken(completions, rows):
        raise ValueError("no answer field")

    home, data = str(tmp_path / "home"), str(_prompts(tmp_path, 8))
    hp = {"weights": str(small_base), "group_size": 2, "max_new_tokens": 4, "max_epochs": 1}
    trainer = Trainer("llm-tiny", task="reinforcement_learning", home=home, verbose=False, progress_bar=False,
                      hyperparams={**hp, "rewards": [sevens]})
    with pytest.raises(TwinkleError, match=r"code in hyperparameters \(rewards\)"):
        trainer.supervise(data)
    done = trainer.fit(data)
    assert done.status == "finished"
    name = f"code:{__name__}.test_a_reward_from_code_trains_is_recorded_by_name_and_a_failing_one_fails_the_run" \
           ".<locals>.sevens"
    assert RunStore(home).get(done.run_uri).hyperparams["rewards"] == [name]
    with pytest.raises(RewardError, match="was a function given in code to the run this one continues"):
        Trainer.from_checkpoint(done.run_uri, home=home, verbose=False).fit()
    again = Trainer.from_checkpoint(done.run_uri, home=home, verbose=False, hyperparams={"rewards": [sevens]}).fit()
    assert again.status == "finished" and again.parent == done.run_uri
    failing = Trainer("llm-tiny", task="reinforcement_learning", home=home, verbose=False, progress_bar=False,
                      hyperparams={**hp, "rewards": [broken]})
    with pytest.raises(RewardError, match=r"reward 'broken' raised ValueError: no answer field.*'Spell 1\d\d'"):
        failing.fit(data)
    assert [run.status for run in RunStore(home).list()].count("failed") == 1


def test_the_plan_counts_a_prompts_whole_group_of_completions(small_base: Path, tmp_path: Path) -> None:
    """A step of reinforcement learning runs its loss on group_size sequences of prompt + max_new_tokens per prompt:
    the planner's FLOPs and activation memory per sample (prompt) are those of the whole group — four times as
    many with groups of 8 as with groups of 2."""
    facts = {}
    for group in (2, 8):
        trainer = Trainer("llm-tiny", task="reinforcement_learning", home=str(tmp_path / "home"), verbose=False,
                          hyperparams={"weights": str(small_base), "rewards": [SEVEN], "group_size": group,
                                       "max_new_tokens": 16, "batch_size": 4})
        plan = trainer.plan(str(_prompts(tmp_path, 12)))
        memory = next(d for d in plan.decisions if d.name == "memory").reason
        facts[group] = (plan.estimates["flops_per_sample"], float(memory.split("2 × ")[1].split(" kB")[0]))
    assert facts[8][0] == 4 * facts[2][0] and facts[8][1] == pytest.approx(4 * facts[2][1], rel=0.01), facts


def test_a_registered_rollout_engine_samples_every_step_and_hears_of_every_update(small_base: Path,
                                                                                  tmp_path: Path) -> None:
    """An engine registered by name (what a vLLM engine would do) samples each step's completions and is told after
    each optimizer step that the weights changed; a second engine with its name is refused."""
    from twinkle_llm.rl import ROLLOUT_ENGINES, LocalEngine, register_rollout_engine

    calls: list[str] = []

    class Counting(LocalEngine):
        name = "counting-test"

        def sample(self, alg, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
            calls.append("sample" if alg.training else "validate")
            return super().sample(alg, *args, **kwargs)

        def weights_updated(self, alg) -> None:  # noqa: ANN001
            calls.append("updated")

    register_rollout_engine(Counting)
    try:
        with pytest.raises(TwinkleError, match="'counting-test' is Counting already"):
            register_rollout_engine(type("Other", (LocalEngine,), {"name": "counting-test"}))
        result = Trainer("llm-tiny", task="reinforcement_learning", home=str(tmp_path / "home"), verbose=False,
                         progress_bar=False, hyperparams={
                             "weights": str(small_base), "rewards": [SEVEN], "rollout_engine": "counting-test",
                             "group_size": 2, "max_new_tokens": 4, "batch_size": 4, "max_steps": 3,
                             "val_generations": 0}).fit(str(_prompts(tmp_path, 12)))
    finally:
        ROLLOUT_ENGINES.pop("counting-test", None)
    assert result.status == "finished"
    training = [call for call in calls if call != "validate"]  # validation answers greedily through it too
    assert training == ["sample", "updated"] * 3, calls  # each rollout from the weights of the update before it
