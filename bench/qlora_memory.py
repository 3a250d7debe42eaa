"""What QLoRA's 4-bit base saves (issue 56: the base's weights in NF4 take ≤ 0.3 of their bf16 size).

A Llama of about 110 M parameters built from a config (hidden 768, 12 layers, MLP 2048, vocabulary 32,000, as
small Llama-style models are shaped), saved as a Hugging Face folder. Two cases, each in a fresh process, in an
order that alternates over the rounds: ``lora`` (the base in fp32, as a LoRA run holds it) and ``qlora``
(``quantize_base="nf4"``: the decoder's linear weights in NF4). Each builds the model the way twinkle-llm's
``CausalLM`` does for that case (``twinkle_llm.quantized.load_nf4`` or the folder in fp32, then rank-16 peft
adapters on every linear layer), then runs 3 training steps (forward, backward, AdamW) on one sequence of 64
tokens — short, so that the step's memory is mostly the weights' rather than the activations'.

Measured: the decoder's linear weights — bf16 bytes against the NF4 tensors' bytes (codes, scales and the scales'
factors: ``twinkle_core.planning.stored_bytes``); every parameter's bytes as the model holds it; the process's
resident memory above what it held before building the model: once built (``rss_built``), after each step's forward
(the step's activations alive; the largest), and the growth of its high-water mark (``ru_maxrss``) over loading
and the steps (small where the imports had set a higher one: LoRA's base is mapped from the file, read in by the
first forward);
CPU seconds per step. Each case runs with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 kB, so that freed
tensors leave the resident memory (with its moving threshold, weights freed while loading stay counted).
Ratios are ``qlora`` over ``lora`` per round, then the median and spread. Writes ``bench/results/qlora_memory.json``.

    python bench/qlora_memory.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fit_speed import in_child, summary  # bench/ is the script's folder: on sys.path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False}
BATCH, LENGTH, STEPS, RANK = 1, 64, 3, 16


def write_base(folder: Path) -> int:
    """The random ~110 M Llama saved into ``folder``; returns its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM

    from twinkle_llm.model import build_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("llama", dict(SHAPE)), dtype=torch.float32)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def rss_bytes() -> int:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int:
    """The process's resident memory now (``/proc/self/statm``)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(case: str, folder: Path) -> None:
    """One case in this process: build the model as ``CausalLM`` does, train ``STEPS`` steps, print the figures."""
    import torch
    from peft import LoraConfig, get_peft_model

    import twinkle_llm  # noqa: F401  (its logging filter, as in a run)
    from twinkle_core.planning import stored_bytes
    from twinkle_llm.folders import load_folder_model
    from twinkle_llm.quantized import is_nf4, load_nf4

    torch.set_num_threads(1)
    before, start = rss_bytes(), current_rss()
    if case == "qlora":
        model, done = load_nf4(str(folder))
        linear_full, linear_held = done.full_bytes, done.nf4_bytes
    else:
        model = load_folder_model(str(folder), dtype=torch.float32)
        linear = [m.weight for name, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and not name.endswith("lm_head")]
        linear_full, linear_held = sum(2 * w.numel() for w in linear), sum(stored_bytes(w) for w in linear)
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    built = current_rss() - start
    held = sum(stored_bytes(p) for p in model.parameters())
    nf4 = sum(1 for p in model.parameters() if is_nf4(p))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SHAPE["vocab_size"], (BATCH, LENGTH), generator=generator)
    cpu_steps, losses, in_step = [], [], 0
    for _ in range(STEPS):
        started = time.process_time()
        loss = model(input_ids=ids, labels=ids).loss
        in_step = max(in_step, current_rss() - start)  # the activations kept for backward are all alive here
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        cpu_steps.append(time.process_time() - started)
        losses.append(round(float(loss), 4))
    print(json.dumps({"case": case, "linear_bf16_bytes": linear_full, "linear_held_bytes": linear_held,
                      "parameter_bytes": held, "nf4_tensors": nf4, "rss_built_bytes": built,
                      "rss_after_forward_bytes": in_step, "peak_rss_above_start_bytes": rss_bytes() - before,
                      "cpu_seconds_per_step": round(sum(cpu_steps[1:]) / (STEPS - 1), 3), "losses": losses}))


def main() -> None:
    """Write the base, run the interleaved rounds, write the summary."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "FOLDER"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    # every allocation of 128 kB or more its own mapping, returned when freed: the resident memory then follows the
    # tensors alive (glibc's moving threshold would keep freed weights in the heap, counted as resident)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    with tempfile.TemporaryDirectory(prefix="qlora-bench-") as work:
        folder = Path(work) / "llama-110m"
        parameters = write_base(folder)
        rounds = []
        for index in range(args.rounds):
            order = ("lora", "qlora") if index % 2 == 0 else ("qlora", "lora")
            cases = {case: in_child("qlora_memory.py", case, str(folder)) for case in order}
            rounds.append(cases)
            print(json.dumps({"round": index, **{c: {k: v for k, v in f.items() if k != "case"}
                                                  for c, f in cases.items()}}), flush=True)
    first = rounds[0]
    ratios = {key: summary([r["qlora"][key] / r["lora"][key] for r in rounds])
              for key in ("parameter_bytes", "rss_built_bytes", "rss_after_forward_bytes",
                          "peak_rss_above_start_bytes", "cpu_seconds_per_step")}
    result: dict[str, Any] = {
        "bench": "qlora_memory", "python": sys.version.split()[0], "machine": platform.machine(),
        "model": {"parameters": parameters, **SHAPE}, "batch": [BATCH, LENGTH], "lora_rank": RANK,
        "rounds": args.rounds,
        "nf4_linear_share_of_bf16": round(first["qlora"]["linear_held_bytes"] / first["qlora"]["linear_bf16_bytes"], 4),
        "linear_bytes": {"bf16": first["qlora"]["linear_bf16_bytes"], "nf4": first["qlora"]["linear_held_bytes"],
                         "fp32_as_lora_holds_it": first["lora"]["linear_held_bytes"]},
        "qlora_over_lora": ratios,
        "per_round": rounds,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "qlora_memory.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("nf4_linear_share_of_bf16", "linear_bytes", "qlora_over_lora")},
                     indent=2))


if __name__ == "__main__":
    main()
