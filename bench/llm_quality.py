"""twinkle-llm's learning in full, on one CPU thread: the three measurements the plugin's tests assert in their
cheap form, with their curves, baselines and costs.

1. **Pre-training from scratch**: ``llm-tiny`` on CPython's help topics (``twinkle_llm.samples.write_topics``,
   PSF licence; 71 documents train, 8 held out), 128-token windows, a 1,024-id BPE, lr 3e-3 constant, batch 8.
   The held-out perplexity after every epoch beside the unigram's and the best interpolated bigram's on exactly
   the same tokens (``twinkle_llm.baselines``); tokens/s and MFU as the run measured them; CPU-seconds.
2. **Instruction tuning with LoRA** from that model exported as an ``hf`` folder, on the generated opposites task
   (``twinkle_llm.samples.opposites``: 224 prompts train, 32 held out): the exact match on the 32 held-out prompts
   before and every ``--every`` epochs, and CPU-seconds.
3. **DPO with LoRA** from the same folder on pairs of that task (the right opposite chosen over a fixed wrong
   word): the held-out preference accuracy (implicit reward of the chosen above the rejected) and the model's own
   choice (the likelier answer), before and after; ``val_preference_accuracy`` per epoch.
4. **Export parity**: max |Δ| of the logits of the ``hf``, ``peft`` and ``onnx`` exports against the trained model
   on the validation windows.

Writes ``bench/results/llm_quality.json``.

    python bench/llm_quality.py [--pretrain-epochs 8] [--sft-epochs 50] [--every 5] [--dpo-epochs 10]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightning as L  # noqa: E402
import torch  # noqa: E402

from twinkle_core import RunStore, Trainer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def curve(run_dir: str, metric: str) -> list[dict[str, float]]:
    """``metric`` at each validation of a run (from its ``logs/metrics.csv``), by epoch."""
    with open(Path(run_dir) / "logs" / "metrics.csv", newline="") as handle:
        return [{"epoch": int(row["epoch"]), "step": int(row["step"]), metric: round(float(row[metric]), 4)}
                for row in csv.DictReader(handle) if row.get(metric)]


def exact_match(model: Any, prompts: list[tuple[str, str]]) -> float:
    """The share of ``prompts`` the model answers exactly (greedy, 8 tokens at most)."""
    hits = sum(model.generate([{"role": "user", "content": prompt}], max_new_tokens=8).strip() == answer
               for prompt, answer in prompts)
    return hits / len(prompts)


class ExactMatchCurve(L.Callback):
    """The held-out exact match before training and every ``every`` epochs, with the CPU-seconds spent until then
    (its own generations included)."""

    def __init__(self, prompts: list[tuple[str, str]], every: int, started: float) -> None:
        """Measure on ``prompts``; CPU-seconds count from ``started`` (``time.process_time()``)."""
        self.prompts, self.every, self.started = prompts, every, started
        self.points: list[dict[str, float]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Before any step (LoRA's B starts at zero: the model is the base)."""
        self.points.append({"epoch": 0, "exact_match": exact_match(pl_module, self.prompts), "cpu_seconds": 0.0})

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After every ``every``-th epoch and the last."""
        epoch = trainer.current_epoch + 1
        if epoch % self.every == 0 or epoch == trainer.max_epochs:
            spent = time.process_time() - self.started
            self.points.append({"epoch": epoch, "exact_match": exact_match(pl_module, self.prompts),
                                "cpu_seconds": round(spent, 1)})


def utilisation(run_uri: str) -> dict[str, Any]:
    """What the run measured of its speed."""
    measured = RunStore().get(run_uri).measured
    return {k: measured.get(k) for k in ("tokens_per_second", "samples_per_second", "achieved_flops_per_second",
                                         "mfu", "peak_source", "data_wait_fraction", "train_seconds")}


def pretrain(work: Path, epochs: int) -> tuple[Trainer, dict[str, Any]]:
    """Stage 1."""
    from twinkle_core.data import ModelInput, PrepareContext
    from twinkle_llm.baselines import bigram_perplexity, unigram_perplexity
    from twinkle_llm.data import TextProcessor
    from twinkle_llm.samples import write_topics

    topics = write_topics(work / "topics.jsonl")
    trainer = Trainer("llm-tiny", progress_bar=False, verbose=False,
                      hyperparams={"max_epochs": epochs, "max_seq_len": 128, "vocab_size": 1024, "batch_size": 8,
                                   "lr": 3e-3, "scheduler": "none"})
    cpu, wall = time.process_time(), time.perf_counter()
    result = trainer.fit(str(topics))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    spec = trainer.algorithm.data_spec
    data = TextProcessor(max_seq_len=128, vocab_size=1024).prepare(
        str(topics), PrepareContext(seed=0, model_input=ModelInput(tokenizer=spec.extra["tokenizer"])))
    packing = next(d for d in result.plan.decisions if d.name == "packing")
    return trainer, {
        "val_perplexity": round(result.metrics["val_perplexity"], 2),
        "bigram_perplexity": round(bigram_perplexity(data.train, data.val, spec.vocab_size), 2),
        "unigram_perplexity": round(unigram_perplexity(data.train, data.val, spec.vocab_size), 2),
        "curve": curve(result.run_dir, "val_perplexity"),
        "packing": packing.reason, "parameters": result.plan.estimates.get("parameters"),
        "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1),
        "utilisation": utilisation(result.run_uri),
        "onnx_max_abs_diff": trainer.export(format="onnx", output=str(work / "llm-tiny.onnx")).max_abs_diff,
    }


def instruction_tune(work: Path, base: str, epochs: int, every: int) -> dict[str, Any]:
    """Stage 2."""
    from twinkle_llm.samples import opposites, write_conversations

    train, held_out = opposites()
    data = write_conversations(work / "opposites.jsonl", train)
    started = time.process_time()
    probe = ExactMatchCurve(held_out, every, started)
    trainer = Trainer("llm-tiny", task="instruction_tuning", progress_bar=False, verbose=False, callbacks=[probe],
                      hyperparams={"weights": base, "lora_rank": 16, "lr": 3e-3, "max_epochs": epochs,
                                   "val_fraction": 0.05, "batch_size": 8, "max_seq_len": 128})
    wall = time.perf_counter()
    result = trainer.fit(str(data))
    cpu, wall = time.process_time() - started, time.perf_counter() - wall
    merged, adapter = trainer.export(format="hf"), trainer.export(format="peft")
    return {"exact_match_curve": probe.points, "exact_match": probe.points[-1]["exact_match"],
            "val_loss": round(result.metrics["val_loss"], 4), "cpu_seconds": round(cpu, 1),
            "wall_seconds": round(wall, 1), "utilisation": utilisation(result.run_uri),
            "hf_max_abs_diff": merged.max_abs_diff, "peft_max_abs_diff": adapter.max_abs_diff,
            "trainable_parameters": result.plan.estimates.get("trainable"),
            "parameters": result.plan.estimates.get("parameters")}


def prefer(work: Path, base: str, epochs: int) -> dict[str, Any]:
    """Stage 3."""
    from twinkle_llm.samples import opposites, wrong_answers, write_preferences

    train, held_out = opposites()
    wrong = wrong_answers()
    data = write_preferences(work / "prefs.jsonl", train, wrong)
    trainer = Trainer("llm-tiny", task="preference_tuning", progress_bar=False, verbose=False,
                      hyperparams={"weights": base, "lora_rank": 16, "lr": 5e-3, "beta": 1.0, "max_epochs": epochs,
                                   "batch_size": 16, "val_fraction": 0.05})
    cpu, wall = time.process_time(), time.perf_counter()
    result = trainer.fit(str(data))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    model = trainer.algorithm

    def score(prompt: str, answer: str, reference: bool) -> float:
        return model.log_likelihood([{"role": "user", "content": prompt}], answer, reference=reference)

    def share(test: Any) -> float:
        return sum(bool(test(p, a, wrong[a])) for p, a in held_out) / len(held_out)

    return {
        "held_out_likelihood_accuracy_before": share(lambda p, a, b: score(p, a, True) > score(p, b, True)),
        "held_out_likelihood_accuracy_after": share(lambda p, a, b: score(p, a, False) > score(p, b, False)),
        "held_out_preference_accuracy": share(
            lambda p, a, b: score(p, a, False) - score(p, a, True) > score(p, b, False) - score(p, b, True)),
        "val_preference_accuracy_curve": curve(result.run_dir, "val_preference_accuracy"),
        "val_reward_margin": round(result.metrics["val_reward_margin"], 4),
        "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "utilisation": utilisation(result.run_uri),
    }


def main() -> None:
    """Run the three stages and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain-epochs", type=int, default=8)
    parser.add_argument("--sft-epochs", type=int, default=50)
    parser.add_argument("--every", type=int, default=5, help="epochs between exact-match measurements")
    parser.add_argument("--dpo-epochs", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    work = Path(tempfile.mkdtemp(prefix="llm-quality-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    trainer, pretraining = pretrain(work, args.pretrain_epochs)
    print(json.dumps({"pretraining": pretraining}), flush=True)
    base = trainer.export(format="hf", output=str(work / "llm-tiny-hf"))
    pretraining["hf_max_abs_diff"] = base.max_abs_diff
    sft = instruction_tune(work, base.path, args.sft_epochs, args.every)
    print(json.dumps({"instruction_tuning": sft}), flush=True)
    dpo = prefer(work, base.path, args.dpo_epochs)
    print(json.dumps({"preference_tuning": dpo}), flush=True)
    out = {"machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                       "torch": torch.__version__},
           "settings": vars(args), "pretraining": pretraining, "instruction_tuning": sft, "preference_tuning": dpo}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "llm_quality.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / 'llm_quality.json'}")


if __name__ == "__main__":
    main()
