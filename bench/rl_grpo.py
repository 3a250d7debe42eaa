"""GRPO in twinkle-llm (issue 54): what it learns after a short SFT run, and its speed against TRL's GRPOTrainer.

The task, verifiable: ``Spell N backwards`` → N's digits reversed (``exact_answer``: the answer's last number equals
it), N drawn from 100–999 — 300 numbers for SFT, 300 other prompts for GRPO, 100 others held out for both. The model:
a random 2-layer Llama (hidden 64) with a 300-id tokenizer (``twinkle_llm.samples.write_random_base``).

**Quality.** A short SFT run (``causal_lm`` on the 300 ``Spell N backwards M`` lines, 25 epochs: held-out exact
match about 0.1), exported as an HF folder; GRPO from it (``reinforcement_learning``, full weights: groups of 8,
8 prompts a step, 8 new tokens at temperature 0.5, ``kl_coef`` 0.05, lr 5e-4, 20 epochs). The held-out exact match
of the greedy answer (transformers' ``generate``, scored by twinkle-llm's ``exact_answer`` outside Twinkle's loop)
before and after; the goal: at least 0.3 higher, or 0.9. The sampled reward and the held-out reward by epoch are
drawn in ``bench/results/rl_reward_curve.png``.

**Speed.** The same GRPO step — 8 prompts of the GRPO set, a group of 8 completions each (8 new tokens, temperature
0.5), the KL term to a frozen copy (β 0.05), one AdamW update, lr 5e-4, full weights in fp32 — from the SFT folder,
by ``twinkle`` (``Trainer(task="reinforcement_learning").fit`` with ``max_steps``) and by ``trl``
(``GRPOTrainer`` with ``GRPOConfig(num_generations=8, per_device_train_batch_size=64, max_completion_length=8,
beta=0.05, ...)``, its ``loss_type`` "dapo" = Twinkle's default per-token normalisation, the same reward function),
``--steps`` steps each, in rounds whose order alternates, each case in a fresh process (``fit_speed.in_child``) that
first runs one step untimed. The bench wraps each library's own sampling call — Twinkle's rollout engine
(``LocalEngine.sample``: its own KV-cached decoding, each prompt's pass shared by its group), TRL's transformers
``generate`` (KV cache) — to count the completion tokens (up to and including the first stop) and the CPU seconds
spent in it (rollout tokens per CPU second; per wall second beside it), and a callback of each library times every
optimizer step in CPU seconds (seconds per RL step, the median of the timed steps; CPU time, as other load on the
machine would skew the wall clock). The ratios are TRL's seconds over Twinkle's, and Twinkle's rollout tokens/s over TRL's, per round,
then the median and spread (goal ≥ 1.0). A third case, ``twinkle_fp32``, pins ``precision="32-true"``: the plan's
default on this CPU is fp32 too, but it keeps timing a few steps in bf16-mixed (``precision_switching``: after 10
steps, then at doubling intervals), rollouts included, and in a 20-step run those steps weigh. Writes
``bench/results/rl_grpo.json``.

    python bench/rl_grpo.py [--rounds 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fit_speed import in_child, summary  # bench/ is the script's folder: on sys.path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: every model is a folder this bench wrote
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

HIDDEN, SFT_EPOCHS, GRPO_EPOCHS = 64, 25, 20
GROUP, PROMPTS_PER_STEP, NEW_TOKENS, TEMPERATURE, BETA, LR = 8, 8, 8, 0.5, 0.05, 5e-4
RESULTS = Path(__file__).resolve().parent / "results"


def numbers() -> tuple[list[int], list[int], list[int]]:
    """The SFT, GRPO and held-out numbers (disjoint)."""
    drawn = random.Random(0).sample(range(100, 1000), 700)
    return drawn[:300], drawn[300:600], drawn[600:]


def prompt(n: int) -> str:
    """The task's prompt for ``n``."""
    return f"Spell {n} backwards"


def write_data(folder: Path) -> dict[str, Path]:
    """The base model folder, the SFT text, the GRPO prompts and the held-out prompts under ``folder``."""
    from twinkle_llm.samples import write_random_base

    sft, rl, held = numbers()
    base = write_random_base(folder / "base", hidden_size=HIDDEN, intermediate_size=4 * HIDDEN)
    (folder / "sft.jsonl").write_text("".join(json.dumps({"text": f"{prompt(n)} {str(n)[::-1]}"}) + "\n"
                                              for n in sft))
    for name, chosen in (("grpo", rl), ("held-out", held)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": prompt(n), "answer": str(n)[::-1]}) + "\n"
                                                      for n in chosen))
    return {"base": base, "sft": folder / "sft.jsonl", "grpo": folder / "grpo.jsonl", "held": folder / "held-out.jsonl"}


def exact_match(model_folder: Path, prompts: Path) -> float:
    """The share of ``prompts`` whose greedy answer (8 new tokens, transformers' ``generate``) ``exact_answer``
    scores 1."""
    from transformers import AutoModelForCausalLM

    from twinkle_llm.rewards import ExactAnswer
    from twinkle_llm.tokenizing import TextTokenizer

    tokenizer = TextTokenizer.from_folder(str(model_folder))
    model = AutoModelForCausalLM.from_pretrained(str(model_folder), local_files_only=True).eval()
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    answers = []
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([tokenizer.encode(row["prompt"])])
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=list(tokenizer.stop_ids), pad_token_id=tokenizer.pad_id)
            answers.append(tokenizer.decode([t for t in out[0, ids.shape[1]:].tolist()
                                             if t not in tokenizer.stop_ids]))
    return sum(ExactAnswer()(answers, rows)) / len(rows)


def grpo_hyperparams(weights: Path, **more: Any) -> dict[str, Any]:
    """The GRPO run's hyperparameters (both parts)."""
    return {"weights": str(weights), "rewards": "exact_answer", "group_size": GROUP, "max_new_tokens": NEW_TOKENS,
            "temperature": TEMPERATURE, "kl_coef": BETA, "lr": LR, "batch_size": PROMPTS_PER_STEP,
            "progress_bar": False, **more}


def short_sft(work: Path, data: dict[str, Path]) -> tuple[Path, float]:
    """The short SFT run on the base, exported as ``work/sft-hf``; that folder and the run's seconds."""
    from twinkle_core import Trainer

    sft = Trainer("llm-tiny", home=str(work / "home"), verbose=False,
                  hyperparams={"weights": str(data["base"]), "max_epochs": SFT_EPOCHS, "batch_size": 16, "lr": 3e-3,
                               "progress_bar": False})
    started = time.perf_counter()
    sft.fit(str(data["sft"]))
    seconds = time.perf_counter() - started
    return Path(sft.export(format="hf", output=str(work / "sft-hf")).path), seconds


def quality(work: Path) -> dict[str, Any]:
    """SFT, then GRPO; the held-out exact match of each, and the reward curve."""
    import pandas as pd

    from twinkle_core import Trainer

    data = write_data(work)
    _, sft_seconds = short_sft(work, data)
    grpo = Trainer("llm-tiny", task="reinforcement_learning", home=str(work / "home"), verbose=False,
                   hyperparams=grpo_hyperparams(work / "sft-hf", max_epochs=GRPO_EPOCHS))
    started = time.perf_counter()
    result = grpo.fit(str(data["grpo"]))
    grpo_seconds = time.perf_counter() - started
    grpo.export(format="hf", output=str(work / "grpo-hf"))
    before, after = exact_match(work / "sft-hf", data["held"]), exact_match(work / "grpo-hf", data["held"])
    metrics = pd.read_csv(Path(result.run_dir) / "logs" / "metrics.csv")
    sampled = metrics["train_reward_epoch"].dropna().tolist()
    held_out = metrics["val_reward"].dropna().tolist()
    draw_curve(sampled, held_out, before, after, int(result.plan.estimates["optimizer_steps_per_epoch"]),
               len(data["grpo"].read_text().splitlines()) - int(result.plan.estimates["train_samples"]))
    return {"held_out_exact_match": {"sft": round(before, 3), "grpo": round(after, 3), "gain": round(after - before, 3)},
            "goal": "gain >= 0.3 or grpo >= 0.9", "met": after - before >= 0.3 or after >= 0.9,
            "sampled_reward_by_epoch": [round(v, 3) for v in sampled],
            "val_reward_by_epoch": [round(v, 3) for v in held_out],
            "seconds": {"sft": round(sft_seconds, 1), "grpo": round(grpo_seconds, 1)}, "run": result.run_uri}


def draw_curve(sampled: list[float], held_out: list[float], before: float, after: float, steps: int,
               validation: int) -> None:
    """``rl_reward_curve.png``: the sampled and validation rewards by epoch (``steps`` optimizer steps an epoch,
    ``validation`` prompts held out of the GRPO set), the held-out exact match before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    epochs = range(1, len(sampled) + 1)
    axis.plot(epochs, sampled, marker="o", label="sampled completions' reward (temperature 0.5)")
    axis.plot(range(1, len(held_out) + 1), held_out, marker="s",
              label=f"validation: greedy reward on {validation or 'the'} held-out GRPO prompts")
    axis.axhline(before, color="grey", linestyle="--", label=f"exact match on 100 other numbers after SFT ({before:.2f})")
    axis.axhline(after, color="green", linestyle=":", label=f"... after GRPO ({after:.2f})")
    axis.set_xlabel(f"GRPO epoch ({steps} steps of {PROMPTS_PER_STEP} prompts × {GROUP} completions)")
    axis.set_ylabel("exact match (reward)")
    axis.set_ylim(0, 1)
    axis.set_title("GRPO on 'Spell N backwards' after a short SFT run")
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(RESULTS / "rl_reward_curve.png", dpi=100)


# ---------------------------------------------------------------------------------------------- speed
class RolloutClock:
    """Times each library's own sampling call while ``armed`` (inside a training step: not a planner's probe nor a
    validation) and counts the completion tokens it returns (up to and including the first stop): Twinkle's
    rollout engine (``twinkle_llm.rl.LocalEngine.sample``) or transformers' ``generate`` (what TRL's GRPOTrainer
    samples with)."""

    def __init__(self, stops: set[int]) -> None:
        self.tokens, self.seconds, self.cpu, self.stops, self.armed = 0, 0.0, 0.0, stops, False

    def _timed(self, original: Any, count: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.armed:
                return original(*args, **kwargs)
            started, cpu = time.perf_counter(), time.process_time()
            out = original(*args, **kwargs)
            self.seconds += time.perf_counter() - started
            self.cpu += time.process_time() - cpu
            self.tokens += count(out, args, kwargs)
            return out

        return timed

    def wrap_engine(self) -> None:
        """Time Twinkle's ``local`` rollout engine: its tokens are its completion mask's ones."""
        from twinkle_llm.rl import LocalEngine

        LocalEngine.sample = self._timed(LocalEngine.sample,  # type: ignore[method-assign]
                                         lambda out, args, kwargs: int(out[1].sum()))

    def wrap_generate(self) -> None:
        """Time transformers' ``generate`` (every model's)."""
        from transformers.generation.utils import GenerationMixin

        def count(out: Any, args: Any, kwargs: Any) -> int:
            prompt_length = (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[1]).shape[1]
            sequences = out.sequences if hasattr(out, "sequences") else out
            tokens = 0
            for row in sequences[:, prompt_length:].tolist():
                ended = next((i for i, t in enumerate(row) if t in self.stops), None)
                tokens += len(row) if ended is None else ended + 1
            return tokens

        GenerationMixin.generate = self._timed(GenerationMixin.generate, count)  # type: ignore[method-assign]

    def reset(self) -> None:
        """Start counting afresh (after the warm-up)."""
        self.tokens, self.seconds, self.cpu = 0, 0.0, 0.0


def run_twinkle(folder: Path, prompts: Path, steps: int, home: Path, clock: RolloutClock,
                precision: str | None = None) -> list[float]:
    """``steps`` GRPO steps by Twinkle's Trainer (``precision`` pinned, or the plan's); the CPU seconds of each
    optimizer step."""
    import lightning as L

    from twinkle_core import Trainer

    class StepClock(L.Callback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
            clock.armed, self.started = True, time.process_time()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
            self.seconds.append(time.process_time() - self.started)
            clock.armed = False

    timer = StepClock()
    Trainer("llm-tiny", task="reinforcement_learning", home=str(home), verbose=False, callbacks=[timer],
            hyperparams=grpo_hyperparams(folder, max_steps=steps, **({"precision": precision} if precision else {}))
            ).fit(str(prompts))
    return timer.seconds


def run_trl(folder: Path, prompts: Path, steps: int, work: Path, clock: RolloutClock) -> list[float]:
    """``steps`` GRPO steps by TRL's GRPOTrainer (same model, prompts, group, tokens, β, lr); each step's CPU
    seconds."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from twinkle_llm.rewards import ExactAnswer
    from twinkle_llm.tokenizing import TextTokenizer

    ours = TextTokenizer.from_folder(str(folder))
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"),
                                        eos_token=ours.backend.id_to_token(ours.eos_id),
                                        pad_token=ours.backend.id_to_token(ours.pad_id),
                                        padding_side="left")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    exact = ExactAnswer()

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return exact(completions, [{"answer": a} for a in answer])

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.armed, self.started = True, time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.seconds.append(time.process_time() - self.started)
            clock.armed = False

    timer = StepClock()
    config = GRPOConfig(output_dir=str(work / "trl"), num_generations=GROUP,
                        per_device_train_batch_size=GROUP * PROMPTS_PER_STEP, max_completion_length=NEW_TOKENS,
                        temperature=TEMPERATURE, beta=BETA, learning_rate=LR, max_steps=steps, use_cpu=True,
                        report_to="none", save_strategy="no", logging_steps=steps, seed=0, bf16=False,
                        dataloader_num_workers=0, disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    trainer = GRPOTrainer(model=model, reward_funcs=reward,
                          args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          callbacks=[timer])
    trainer.train()
    return timer.seconds


def child(case: str, folder: Path, prompts: Path, steps: int) -> None:
    """One case in this process (``--child``): one step untimed, then ``steps`` timed; prints its figures."""
    from twinkle_core.planning.hardware import cpu_budget
    from twinkle_llm.tokenizing import TextTokenizer

    torch.set_num_threads(cpu_budget()[0])
    clock = RolloutClock(set(TextTokenizer.from_folder(str(folder)).stop_ids))
    clock.wrap_generate() if case == "trl" else clock.wrap_engine()
    run = {"twinkle": run_twinkle, "trl": run_trl,
           "twinkle_fp32": lambda *args: run_twinkle(*args, precision="32-true")}[case]
    with tempfile.TemporaryDirectory() as scratch:
        run(folder, prompts, 1, Path(scratch) / "warm", clock)
        clock.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        seconds = run(folder, prompts, steps, Path(scratch) / "timed", clock)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"case": case, "steps": len(seconds), "seconds_per_step": round(statistics.median(seconds), 4),
                      "rollout_tokens": clock.tokens, "rollout_seconds": round(clock.seconds, 3),
                      "rollout_cpu_seconds": round(clock.cpu, 3),
                      "rollout_tokens_per_second": round(clock.tokens / max(clock.cpu, 1e-9), 1),
                      "rollout_tokens_per_wall_second": round(clock.tokens / max(clock.seconds, 1e-9), 1),
                      "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Quality, then the speed rounds; write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", nargs=4, metavar=("CASE", "FOLDER", "PROMPTS", "STEPS"))
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        case, folder, prompts, steps = args.child
        child(case, Path(folder), Path(prompts), int(steps))
        return 0
    RESULTS.mkdir(exist_ok=True)
    os.environ.setdefault("TWINKLE_USER", "bench")
    report: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        os.environ["TWINKLE_HOME"] = str(work / "home")
        if not args.skip_quality:
            report["quality"] = quality(work / "quality")
            print(json.dumps(report["quality"]), flush=True)
            folder = work / "quality" / "sft-hf"
            prompts = work / "quality" / "grpo.jsonl"
        else:
            data = write_data(work / "quality")
            folder, _ = short_sft(work, data)
            prompts = data["grpo"]
        rounds = []
        for index in range(args.rounds):
            order = ("twinkle", "trl", "twinkle_fp32") if index % 2 == 0 else ("twinkle_fp32", "trl", "twinkle")
            cases = {case: in_child("rl_grpo.py", case, str(folder), str(prompts), str(args.steps)) for case in order}
            rounds.append(cases)
            print(json.dumps(cases), flush=True)
    from trl import __version__ as trl_version

    step = [r["trl"]["seconds_per_step"] / r["twinkle"]["seconds_per_step"] for r in rounds]
    tokens = [r["twinkle"]["rollout_tokens_per_second"] / r["trl"]["rollout_tokens_per_second"] for r in rounds]
    pinned_step = [r["trl"]["seconds_per_step"] / r["twinkle_fp32"]["seconds_per_step"] for r in rounds]
    pinned_tokens = [r["twinkle_fp32"]["rollout_tokens_per_second"] / r["trl"]["rollout_tokens_per_second"]
                     for r in rounds]
    report["speed"] = {"trl": trl_version, "steps_timed": args.steps, "rounds": rounds,
                       "seconds_per_step_ratio_trl_over_twinkle": summary(step),
                       "rollout_tokens_per_second_ratio_twinkle_over_trl": summary(tokens),
                       "pinned_fp32": {"seconds_per_step_ratio_trl_over_twinkle": summary(pinned_step),
                                       "rollout_tokens_per_second_ratio_twinkle_over_trl": summary(pinned_tokens)},
                       "goal": ">= 1.0"}
    (RESULTS / "rl_grpo.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report["speed"][k] for k in ("seconds_per_step_ratio_trl_over_twinkle",
                                                       "rollout_tokens_per_second_ratio_twinkle_over_trl",
                                                       "pinned_fp32")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
