"""The Tinker server's ``sample``: a request's samples decoded together against one after another, and against
transformers' ``generate``: sampled tokens per CPU second.

The backend (``twinkle_llm.backend.LoraBackend``, what ``twinkle serve --tinker`` samples with) on a random 2-layer
Llama (hidden 256, a 300-id vocabulary: ``write_random_base``) with a rank-8 adapter saved for sampling, as a
client's ``save_weights_for_sampler`` leaves it; one request of ``SAMPLES`` samples of a ``PROMPT``-token prompt,
``TOKENS`` tokens each at temperature 1 (no stop: every sample is as long, so each case makes the same tokens):

* ``twinkle``: ``LoraBackend.sample`` (the prompt's pass once, its cache repeated for the samples, decoded as one
  batch);
* ``one_by_one``: what the server did before: the prompt's pass once, then each sample decoded alone from a copy
  of its cache (``torch.multinomial`` draws);
* ``generate``: transformers' ``generate(num_return_sequences=SAMPLES, do_sample=True)`` on the same adapted model
  (the prompt's pass repeated per sample).

The two other ways run on the saved adapter as peft reads it (``PeftModel.from_pretrained`` over the base folder).

Each round runs the three cases ``CALLS`` times each in a rotating order, all in this process after a warm-up;
ratios per round (CPU time: every thread of the process), then the median and spread over ``ROUNDS`` rounds.
Writes ``bench/results/tinker_sampling.json``.

    python bench/tinker_sampling.py
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

SAMPLES, PROMPT, TOKENS, CALLS, ROUNDS = 8, 32, 48, 3, 5


def one_by_one(network: Any, ids: torch.Tensor) -> int:
    """Each sample from a copy of the prompt's cache, one token at a time (the server's sampling before)."""
    made = 0
    with torch.no_grad():
        first = network(input_ids=ids, use_cache=True)
        for _ in range(SAMPLES):
            past, logits = copy.deepcopy(first.cache), first.logits[0, -1].float()
            for _ in range(TOKENS):
                token = int(torch.multinomial(torch.softmax(logits, -1), 1))
                made += 1
                out = network(input_ids=torch.tensor([[token]]), cache=past, use_cache=True)
                past, logits = out.cache, out.logits[0, -1].float()
    return made


def main() -> int:
    """Run the rounds and write the figures."""
    import numpy as np
    from peft import PeftModel

    from twinkle_core.lowlevel import AdamSettings, Datum, LoraSettings, SampleSettings, ScoresWanted, get_loss
    from twinkle_llm.backend import LoraBackend
    from twinkle_llm.folders import load_folder_model
    from twinkle_llm.samples import write_random_base

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        base = write_random_base(Path(tmp) / "base", hidden_size=256, intermediate_size=512)
        backend = LoraBackend({"tiny": str(base)})
        backend.create("m", "tiny", LoraSettings(rank=8, seed=1))
        prompt = [int(t) for t in torch.randint(5, 300, (PROMPT,), generator=torch.Generator().manual_seed(0))]
        datum = Datum(prompt[:-1], {"target_tokens": np.array(prompt[1:])})
        for _ in range(3):  # an adapter that changes the model (B starts at zero), trained as a client would
            backend.forward_backward("m", [datum], get_loss("cross_entropy"), {}, True)
            backend.optim_step("m", AdamSettings(learning_rate=1e-2))
        weights = str(Path(tmp) / "sampler")
        backend.save("m", weights, False)
        ids = torch.tensor([prompt])
        settings = SampleSettings(max_tokens=TOKENS, temperature=1.0, stop=[])
        # the other ways sample the same adapted model, read as peft reads the saved folder
        network = PeftModel.from_pretrained(load_folder_model(base), weights).eval()

        def twinkle() -> int:
            samples, _ = backend.sample(weights, prompt, SAMPLES, settings, ScoresWanted())
            return sum(len(s.tokens) for s in samples)

        def generate() -> int:
            with torch.no_grad():
                out = network.generate(input_ids=ids, do_sample=True, num_return_sequences=SAMPLES,
                                       max_new_tokens=TOKENS, min_new_tokens=TOKENS, top_k=0, pad_token_id=0)
            return int(out[:, PROMPT:].numel())

        cases: dict[str, Callable[[], int]] = {"twinkle": twinkle, "one_by_one": lambda: one_by_one(network, ids),
                                               "generate": generate}
        for case in cases.values():  # warm-up: first calls' allocations and kernel choices
            case()
        rounds: list[dict[str, float]] = []
        names = list(cases)
        for index in range(ROUNDS):
            rate: dict[str, float] = {}
            for name in names[index % 3:] + names[:index % 3]:
                cpu, made = time.process_time(), 0
                for _ in range(CALLS):
                    made += cases[name]()
                rate[name] = made / (time.process_time() - cpu)
            rounds.append(rate)
            print(f"round {index + 1}: " + ", ".join(f"{k} {v:.0f} tokens/CPU-s" for k, v in rate.items()),
                  file=sys.stderr, flush=True)

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}

    figures = {
        "what": "sampled tokens per CPU second of one Tinker sample request (8 samples of 48 tokens after a "
                "32-token prompt), Twinkle's backend over each other way; >1: Twinkle faster",
        "model": "random Llama, 2 layers, hidden 256, vocabulary 300, a rank-8 adapter",
        "rounds": ROUNDS, "calls_per_round": CALLS,
        "twinkle_over_one_by_one": summary([r["twinkle"] / r["one_by_one"] for r in rounds]),
        "twinkle_over_generate": summary([r["twinkle"] / r["generate"] for r in rounds]),
        "tokens_per_cpu_second": {name: summary([r[name] for r in rounds]) for name in names},
        "machine": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
    }
    out = Path(__file__).resolve().parent / "results" / "tinker_sampling.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
