"""Small real data for trying, testing and benchmarking twinkle-llm offline (nothing is downloaded):

* ``write_topics``: CPython's own help topics (``pydoc_data.topics``: the language reference's 79 topics, PSF
  licence, shipped with every Python) as JSONL with a ``text`` field — a corpus to pre-train on;
* ``opposites``: a generated task with a checkable answer — the opposite of a word, asked in eight phrasings —
  split into prompts to train on and prompts held out;
* ``write_conversations`` / ``write_preferences``: those pairs as instruction-tuning conversations, or as
  preference pairs whose rejected answer is a fixed wrong word (``wrong_answers``);
* ``write_random_base``: a small random Llama saved as Hugging Face saves it, with a tokenizer — a base model
  folder for LoRA mechanics and the Tinker API, no learned weights needed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PAIRS = [("true", "false"), ("open", "close"), ("read", "write"), ("get", "set"), ("first", "last"),
         ("left", "right"), ("input", "output"), ("before", "after"), ("min", "max"), ("add", "remove"),
         ("upper", "lower"), ("start", "stop"), ("old", "new"), ("positive", "negative"), ("inside", "outside"),
         ("local", "global")]
"""Sixteen words and their opposites (each asked both ways)."""

PHRASINGS = ["What is the opposite of {w}?", "opposite of {w}", "Give the opposite of the word {w}.",
             "{w}: what is its opposite?", "The opposite of {w} is", "Name the opposite of {w}.", "opposite: {w}",
             "Which word means the opposite of {w}?"]
"""The eight ways a prompt asks."""

Example = tuple[str, str]
"""A prompt and its answer."""


def write_topics(path: Path, count: int | None = None) -> Path:
    """CPython's help topics (sorted by name; the first ``count``, or all 79) as JSONL lines ``{"text": ...}``."""
    import pydoc_data.topics

    names = sorted(pydoc_data.topics.topics)[:count]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": pydoc_data.topics.topics[name]}) + "\n" for name in names))
    return path


def opposites(held_out: int = 32, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """Every word of ``PAIRS`` (both ways) in every phrasing (256 prompts), shuffled with ``seed``: the prompts to
    train on and ``held_out`` prompts kept out of training (each of their words is trained on in other phrasings)."""
    facts = PAIRS + [(b, a) for a, b in PAIRS]
    pairs = [(phrase.format(w=word), answer) for word, answer in facts for phrase in PHRASINGS]
    random.Random(seed).shuffle(pairs)
    return pairs[held_out:], pairs[:held_out]


def wrong_answers(seed: int = 1) -> dict[str, str]:
    """A fixed wrong answer for each answer of ``opposites``: neither the answer nor the word asked about."""
    asked = {b: a for a, b in PAIRS} | {a: b for a, b in PAIRS}
    words = sorted(asked)
    rng = random.Random(seed)
    return {answer: rng.choice([w for w in words if w not in (answer, asked[answer])]) for answer in words}


def write_conversations(path: Path, examples: list[Example]) -> Path:
    """``examples`` as JSONL conversations (``messages``: the user's prompt, the assistant's answer)."""
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": prompt},
                                                     {"role": "assistant", "content": answer}]}) + "\n"
                            for prompt, answer in examples))
    return path


def write_preferences(path: Path, examples: list[Example], wrong: dict[str, str]) -> Path:
    """``examples`` as JSONL preference pairs: the right answer ``chosen``, ``wrong[answer]`` ``rejected``."""
    path.write_text("".join(json.dumps({"prompt": prompt, "chosen": answer, "rejected": wrong[answer]}) + "\n"
                            for prompt, answer in examples))
    return path


def write_random_base(folder: Path, hidden_size: int = 32, intermediate_size: int = 64, seed: int = 1) -> Path:
    """A random 2-layer Llama (``hidden_size``, ``intermediate_size``, 4 heads) saved into ``folder`` as Hugging
    Face saves it, with a tokenizer trained on spelled-out numbers (a 300-id vocabulary); returns ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM

    from twinkle_llm.model import build_config
    from twinkle_llm.tokenizing import TextTokenizer

    folder = Path(folder)
    tokenizer = TextTokenizer.train([f"Spell {n} backwards {str(n)[::-1]}" for n in range(100, 200)], 300)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(build_config("llama", {
        "hidden_size": hidden_size, "intermediate_size": intermediate_size, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": tokenizer.vocab_size,
        "eos_token_id": tokenizer.eos_id}))
    model.save_pretrained(folder)
    tokenizer.backend.save(str(folder / "tokenizer.json"))
    return folder
