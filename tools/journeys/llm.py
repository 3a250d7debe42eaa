"""twinkle-llm's journey from its wheel: list, pre-train llm-tiny on CPython's help topics, generate (also with
`twinkle llm generate`), export a Hugging Face folder that transformers loads with the same logits, continue (the
continued run encodes its data with the tokenizer its parent trained)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from common import continued, start


def main(work: Path) -> None:
    """Run the journey in ``work`` (its data and run store)."""
    start("llm", "twinkle_llm")
    from twinkle_core import RunStore, Trainer
    from twinkle_llm.samples import write_topics

    data = write_topics(work / "topics.jsonl", count=12)  # a smoke test of the wheel: a few thousand tokens
    trainer = Trainer("llm-tiny", hyperparams={"max_epochs": 1, "max_seq_len": 64, "vocab_size": 512},
                      home=str(work / "home"), progress_bar=False)
    result = trainer.fit(data=str(data))
    assert result.status == "finished" and result.metrics["val_perplexity"] > 1, result.metrics
    text = trainer.algorithm.generate("The ", max_new_tokens=10)
    twinkle = Path(sys.executable).with_name("twinkle")  # the console script, with the command the plugin registers
    said = subprocess.run([str(twinkle), "llm", "generate", result.run_uri, "The ", "--max-new-tokens", "10"],
                          check=True, capture_output=True, text=True,
                          env={**os.environ, "TWINKLE_HOME": str(work / "home")})
    best = trainer.generate("The ", max_new_tokens=10)  # the best checkpoint's, as the command loads it
    assert said.stdout == best + "\n", (said.stdout, best, said.stderr[-2000:])
    exported = trainer.export(format="hf")
    assert exported.max_abs_diff <= 1e-4 and (Path(exported.path) / "model.safetensors").is_file(), exported
    child = continued(result.run_uri, work, max_epochs=2)
    decisions = {d["name"]: d for d in RunStore(str(work / "home")).get(child).plan["decisions"]}
    assert decisions["tokenizer"]["reason"].startswith("the tokenizer the parent run trained"), decisions["tokenizer"]
    print(f"trained {result.run_uri} (perplexity {result.metrics['val_perplexity']:.0f}), wrote {text!r} (and "
          f"{best!r} through `twinkle llm generate`), exported {exported.path} (max |Δ| "
          f"{exported.max_abs_diff:.1e}), continued as {child} with its tokenizer")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
