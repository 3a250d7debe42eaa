"""twinkle-llm's default fit against a plain transformers (+ peft) loop: tokens per second of pre-training and of
LoRA instruction tuning (issue 51: goal ≥ 1.1), and the plan's time estimate against the measured fit.

The model: a Qwen3 folder as transformers writes it from a config (4 layers, hidden 192, 4 heads, 2 KV heads, tied
embeddings) with a byte-level BPE of 8,192 ids trained on the data — a vocabulary 43 times the hidden size, about
Qwen3-0.6B's proportion (151,936 over 1,024 is 148) scaled down to this machine. Two workloads, interleaved in
rounds (the order rotating each round), each case of a round in a fresh process of its own (``fit_speed.in_child``:
what one sets for its process — Twinkle's allocator choice, torch's threads — never reaches the other), the same
model folder, data, batch, sequence length, learning rate, optimizer steps and threads on both sides; before its timed
case a process runs the same case once at its smallest (one step; Twinkle's in a store of its own), so that neither
pays its first imports and kernel choices inside the timing, as in a process that had trained before:

* **pre-training** (full weights) on CPython's help topics (``write_topics``: 91k tokens in 710 windows of 128),
  batch 8, one epoch (89 optimizer steps), lr 1e-3 constant;
* **LoRA instruction tuning** (rank 16, alpha 32, every linear layer but the head) on the generated opposites
  chats (``opposites``: 224 chats packed into 33 windows of 128 tokens), batch 8, 8 epochs (40 steps), lr 3e-3
  constant.

``twinkle``: ``Trainer("llm-tiny", hyperparams={"weights": folder, ...}).fit(data)`` with only the workload's
settings above — the planner's choices (its speed probe in the first round; later rounds reuse the stored result,
as a user's next run would). Timed whole: reading and tokenising the data, planning, loading the folder, training,
validating after every epoch, checkpoints, the record.

``plain``: what a user writes with transformers and peft: the folder's model (fp32; ``load_base`` reads its config
and safetensors, as ``from_pretrained`` would, without a hub to fall back on),
peft's ``get_peft_model`` for LoRA, torch's default AdamW, ``model(input_ids, position_ids, labels).loss``,
``backward``, ``step``; the validation split's loss after every epoch under ``no_grad``. It trains on exactly
Twinkle's batches (the token windows, labels and positions of Twinkle's data processor, read once from a first
Twinkle run before the rounds): the data path is not what is compared. Timed from loading the folder to the last
validation.

Tokens/s counts the predicted tokens (labels that are not ignored) of the epochs trained; both sides train the same
epochs on the same batches, so the ratio is the plain loop's seconds over Twinkle's, per round, then the median and
spread. The validation loss of each side is recorded to show no speed is bought with quality (goal: within 2 %).
Twinkle's MFU per round is recorded with its largest over smallest, beside the training speeds' (Twinkle's measured
tokens/s, which its MFU is computed from, and the plain loop's over its training steps alone; see ``fit_speed``).
Writes ``bench/results/llm_speed.json``.

    python bench/llm_speed.py [--rounds 5] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from fit_speed import agreement, in_child, remembered_mfu, summary, timed  # bench/ is the script's folder: on sys.path

HIDDEN, LAYERS, VOCAB, SEQ, BATCH = 192, 4, 8192, 128, 8
WORKLOADS = {"pretraining": {"task": None, "lr": 1e-3, "lora": 0, "epochs": 1},
             "lora_sft": {"task": "instruction_tuning", "lr": 3e-3, "lora": 16, "epochs": 8}}


def write_base(folder: Path, texts: list[str]) -> Path:
    """The Qwen3 folder (see the module docstring): a byte-level BPE of ``VOCAB`` ids trained on ``texts`` with the
    ChatML template, random weights from a config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from twinkle_llm.samples import CHATML

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials,
                                                           show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=backend.get_vocab_size(), hidden_size=HIDDEN, intermediate_size=3 * HIDDEN,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=HIDDEN // 4, max_position_embeddings=2048, tie_word_embeddings=True)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder


def load_base(folder: Path) -> torch.nn.Module:
    """``write_base``'s model read back from its files alone — ``config.json`` and ``model.safetensors`` of the local
    ``folder`` — with nothing resolved against a hub (a missing file is an error, never a download)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, Qwen3Config

    model = AutoModelForCausalLM.from_config(Qwen3Config.from_json_file(str(folder / "config.json")))
    missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the head is tied to the embeddings, not stored
        raise RuntimeError(f"{folder} does not hold write_base's model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model


def hyperparams(workload: str, folder: Path, epochs: int) -> dict[str, Any]:
    """The workload's settings, as a user passes them to Twinkle."""
    spec = WORKLOADS[workload]
    values = {"weights": str(folder), "max_epochs": epochs, "max_seq_len": SEQ, "batch_size": BATCH, "lr": spec["lr"],
              "scheduler": "none", "progress_bar": False}
    if spec["lora"]:
        values.update({"lora_rank": spec["lora"], "lora_alpha": 2 * spec["lora"]})
    return values


class Batches(L.Callback):
    """Keeps the loaders of the run it watches and stops it at once (``data``: what the plain loop trains on)."""

    def __init__(self) -> None:
        self.train: Any = None
        self.val: Any = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.train, self.val = trainer.train_dataloader, trainer.val_dataloaders
        trainer.should_stop = True


def twinkle_batches(workload: str, folder: Path, data: Path, home: Path) -> tuple[list[Any], list[Any]]:
    """Twinkle's training and validation batches for the workload, in the order its first epoch draws them."""
    from twinkle_core import Trainer

    grab = Batches()
    Trainer("llm-tiny", task=WORKLOADS[workload]["task"], home=str(home), verbose=False, callbacks=[grab],
            hyperparams={**hyperparams(workload, folder, 1), "probe": False}).fit(str(data))
    return [tuple(t.clone() for t in b) for b in grab.train], [tuple(t.clone() for t in b) for b in grab.val]


def twinkle(workload: str, folder: Path, data: Path, home: Path, epochs: int) -> dict[str, Any]:
    """Twinkle's default fit of the workload (see the module docstring)."""
    from twinkle_core import RunStore, Trainer

    trainer = Trainer("llm-tiny", task=WORKLOADS[workload]["task"], home=str(home), verbose=False,
                      hyperparams=hyperparams(workload, folder, epochs))
    start = time.perf_counter()
    result = trainer.fit(str(data))
    seconds = time.perf_counter() - start
    measured = RunStore(str(home)).get(result.run_uri).measured
    probe = result.plan.estimates.get("probe") or {}
    return {"val_loss": round(float(result.metrics["val_loss"]), 4),
            "choices": {d.name: f"{d.value}: {d.reason}" for d in result.plan.decisions
                        if d.name in ("precision", "optimizer_kernel", "torch_threads", "num_workers", "compile",
                                      "checkpoint_every_n_epochs", "fused_loss", "packing", "allocator")},
            "probe_seconds": None if probe.get("reused") else probe.get("seconds"),
            "estimated_seconds": result.plan.estimates.get("estimated_seconds"), "fit_seconds": round(seconds, 2),
            "estimate_over_fit": round(float(result.plan.estimates.get("estimated_seconds") or 0) / seconds, 3),
            "mfu": measured.get("mfu"), "peak_source": measured.get("peak_source"),
            "mfu_remembered_peak": remembered_mfu(measured, result.plan, home),
            "tokens_per_second_measured": measured.get("tokens_per_second")}


def plain(workload: str, folder: Path, train: list[Any], val: list[Any], epochs: int) -> dict[str, Any]:
    """The plain transformers (+ peft) loop on Twinkle's batches (see the module docstring)."""
    spec = WORKLOADS[workload]
    torch.manual_seed(0)
    model = load_base(folder)
    if spec["lora"]:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=spec["lora"], lora_alpha=2 * spec["lora"],
                                                 target_modules="all-linear", lora_dropout=0.0))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=spec["lr"])
    train_seconds = 0.0
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        for ids, labels, positions in train:
            loss = model(input_ids=ids, position_ids=positions, labels=labels, use_cache=False).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        train_seconds += time.perf_counter() - start
        model.eval()
        total = count = 0.0
        with torch.no_grad():
            for ids, labels, positions in val:
                n = float((labels[:, 1:] != -100).sum())
                total += float(model(input_ids=ids, position_ids=positions, labels=labels, use_cache=False).loss) * n
                count += n
    return {"val_loss": round(total / max(count, 1.0), 4), "train_seconds": round(train_seconds, 3)}


def predicted_tokens(train: list[Any], epochs: int) -> int:
    """Labelled tokens of ``epochs`` passes over the batches."""
    return epochs * sum(int((batch[1][:, 1:] != -100).sum()) for batch in train)


def child(workload: str, case: str, folder: Path, data: Path, home: Path, batches: Path, epochs: int) -> None:
    """One case in this process (``--child``): time it, print its figures as one JSON line."""
    from twinkle_core.planning.hardware import cpu_budget

    torch.set_num_threads(cpu_budget()[0])
    train, val = torch.load(batches, weights_only=True)
    if case == "twinkle":  # a one-step fit in a store of its own first: what a process that trained before has paid
        from twinkle_core import Trainer

        Trainer("llm-tiny", task=WORKLOADS[workload]["task"], home=str(home.parent / f"{home.name}-warm"),
                verbose=False, hyperparams={**hyperparams(workload, folder, 1), "max_steps": 1, "probe": False}
                ).fit(str(data))
        out = timed(lambda: twinkle(workload, folder, data, home, epochs))
    else:  # likewise: one epoch of one batch first
        plain(workload, folder, train[:1], val[:1], 1)
        out = timed(lambda: plain(workload, folder, train, val, epochs))
    print(json.dumps(out), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply each workload's epochs (at least 1)")
    parser.add_argument("--workloads", default="pretraining,lora_sft")
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, case, folder, data, home, batches, epochs = args.child
        child(workload, case, Path(folder), Path(data), Path(home), Path(batches), int(epochs))
        return 0
    from twinkle_core.planning.hardware import cpu_budget
    from twinkle_llm.samples import opposites, write_conversations, write_topics

    threads = cpu_budget()[0]
    workloads = args.workloads.split(",")
    figures: dict[str, Any] = {
        "what": "tokens/s of Twinkle's default fit over a plain transformers (+ peft) loop (the loop's seconds over "
                "Twinkle's) on the same model folder, batches and steps; >1: Twinkle faster",
        "model": f"Qwen3 {LAYERS} layers, hidden {HIDDEN}, vocabulary {VOCAB}, tied embeddings",
        "sequence": SEQ, "batch": BATCH, "rounds": args.rounds, "threads": threads,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}", "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        topics = write_topics(work / "topics.jsonl")
        train_chats, _ = opposites()
        chats = write_conversations(work / "opposites.jsonl", train_chats)
        texts = [json.loads(line)["text"] for line in topics.read_text().splitlines()]
        folder = write_base(work / "qwen3", texts + [f"{p} {a}" for p, a in train_chats])
        data = {"pretraining": topics, "lora_sft": chats}
        for workload in workloads:
            home = work / f"home-{workload}"
            train, val = twinkle_batches(workload, folder, data[workload], work / f"grab-{workload}")
            batches = work / f"batches-{workload}.pt"
            torch.save((train, val), batches)
            epochs = max(1, round(WORKLOADS[workload]["epochs"] * args.scale))
            tokens = predicted_tokens(train, epochs)
            rounds: list[dict[str, Any]] = []
            for index in range(args.rounds):
                order = ["twinkle", "plain"] if index % 2 == 0 else ["plain", "twinkle"]
                measured = {}
                for case in order:
                    measured[case] = in_child("llm_speed.py", workload, case, str(folder), str(data[workload]),
                                              str(home), str(batches), str(epochs))
                    print(f"{workload} round {index + 1} {case}: {measured[case]['wall_seconds']} s wall, "
                          f"{measured[case]['cpu_seconds']} s CPU, val_loss {measured[case]['val_loss']}",
                          file=sys.stderr, flush=True)
                rounds.append(measured)
            figures["workloads"][workload] = {
                "epochs": epochs, "steps": epochs * len(train), "predicted_tokens": tokens,
                "twinkle_over_plain_wall": summary([r["plain"]["wall_seconds"] / r["twinkle"]["wall_seconds"]
                                                     for r in rounds]),
                "twinkle_over_plain_cpu": summary([r["plain"]["cpu_seconds"] / r["twinkle"]["cpu_seconds"]
                                                    for r in rounds]),
                "tokens_per_second": {case: summary([tokens / r[case]["wall_seconds"] for r in rounds])
                                      for case in ("twinkle", "plain")},
                "val_loss": {case: summary([r[case]["val_loss"] for r in rounds]) for case in ("twinkle", "plain")},
                "estimate_over_fit": [r["twinkle"]["estimate_over_fit"] for r in rounds],
                "mfu": [r["twinkle"]["mfu"] for r in rounds],
                "mfu_max_over_min": agreement([r["twinkle"]["mfu"] for r in rounds]),
                "mfu_remembered_peak": [r["twinkle"]["mfu_remembered_peak"] for r in rounds],
                "mfu_remembered_peak_max_over_min": agreement([r["twinkle"]["mfu_remembered_peak"] for r in rounds]),
                "twinkle_training_speed_max_over_min": agreement([r["twinkle"]["tokens_per_second_measured"]
                                                                   for r in rounds]),
                "plain_training_speed_max_over_min": agreement([tokens / r["plain"]["train_seconds"]
                                                                 for r in rounds]),
                "peak_source": rounds[-1]["twinkle"]["peak_source"],
                "twinkle_choices": rounds[0]["twinkle"]["choices"],
                "probe_seconds_first_round": rounds[0]["twinkle"]["probe_seconds"],
                "rounds_measured": rounds,
            }
    out = Path(__file__).resolve().parent / "results" / "llm_speed.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({w: {k: v for k, v in f.items() if k != "rounds_measured"}
                      for w, f in figures["workloads"].items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
