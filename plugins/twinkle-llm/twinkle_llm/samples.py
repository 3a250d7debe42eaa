"""Small real data for trying, testing and benchmarking twinkle-llm offline (nothing is downloaded):

* ``write_topics``: CPython's own help topics (``pydoc_data.topics``: the language reference's 79 topics, PSF
  licence, shipped with every Python) as JSONL with a ``text`` field — a corpus to pre-train on;
* ``opposites``: a generated task with a checkable answer — the opposite of a word, asked in eight phrasings —
  split into prompts to train on and prompts held out;
* ``write_conversations`` / ``write_preferences``: those pairs as instruction-tuning conversations, or as
  preference pairs whose rejected answer is a fixed wrong word (``wrong_answers``);
* ``write_random_base``: a small random Llama saved as Hugging Face saves it, with a tokenizer — a base model
  folder for LoRA mechanics and the Tinker API, no learned weights needed;
* ``code_words`` and ``write_chat_base``: a checkable mapping of made-up words asked in eight phrasings, and a tiny
  random Qwen3 folder as transformers writes it from a ``Qwen3Config`` (``eos_token_id`` null), whose tokenizer
  ends a chat turn with ``<|im_end|>`` (ChatML) — what a new user's first LoRA run looks like.
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


CODE_PHRASINGS = ["What is the code word for {w}?", "code word for {w}", "Give the code word of {w}.",
                  "{w}: which code word?", "The code word for {w} is", "Translate {w} into code.", "code: {w}",
                  "Tell me the code word that stands for {w}."]
"""The eight ways a ``code_words`` prompt asks."""


def _made_up_words(count: int, rng: random.Random) -> list[str]:
    """``count`` different pronounceable made-up words of two or three syllables."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    found: dict[str, None] = {}
    while len(found) < count:
        found["".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.choice((2, 3))))] = None
    return list(found)


def code_words(words: int = 100, trained_phrasings: int = 6, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """A fixed mapping of ``words`` made-up words onto made-up code words, each asked in ``CODE_PHRASINGS``:
    ``trained_phrasings`` phrasings of every word to train on (600 prompts by default), the others held out (each
    held-out prompt's word and phrasing are trained on, never together). Shuffled with ``seed``."""
    rng = random.Random(seed)
    made = _made_up_words(2 * words, rng)
    mapping = list(zip(made[:words], made[words:]))
    train, held_out = [], []
    for number, (word, code) in enumerate(mapping):
        order = [(number + k) % len(CODE_PHRASINGS) for k in range(len(CODE_PHRASINGS))]  # every phrasing trained
        for rank, phrasing in enumerate(order):
            (train if rank < trained_phrasings else held_out).append((CODE_PHRASINGS[phrasing].format(w=word), code))
    rng.shuffle(train)
    rng.shuffle(held_out)
    return train, held_out


CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
"""The ChatML template (Qwen's, without tools and thinking): a turn ends with ``<|im_end|>``."""


def write_chat_base(folder: Path, texts: list[str], hidden_size: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """A tiny random Qwen3 saved into ``folder`` as transformers saves it from a ``Qwen3Config`` — whose
    ``eos_token_id`` is null, as a new user's folder has it — with a byte-level BPE trained on ``texts`` (512 ids),
    the ChatML template and ``<|im_end|>`` as the tokenizer's ``eos_token`` (the end of a turn); returns
    ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                                           show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=backend.get_vocab_size(), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=hidden_size // 4, max_position_embeddings=2048, tie_word_embeddings=True)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder

