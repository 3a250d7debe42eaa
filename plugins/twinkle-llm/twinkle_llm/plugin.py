"""The Twinkle plugin of twinkle-llm, found through the ``twinkle`` entry-point group.

It registers the ``causal_lm``, ``instruction_tuning``, ``preference_tuning`` and ``reinforcement_learning`` tasks,
their processors (raw text, conversations, preference pairs, prompts), the ``twinkle llm`` commands, rewards for
reinforcement learning (``twinkle_llm.rewards``) and the decoder-only models: ``llm-tiny`` (CPU minutes),
``llama-<size>``, ``qwen2-<size>`` and ``qwen3-<size>`` (``twinkle_llm.presets``). Like every plugin module it
imports nothing heavy at its top level.
"""

from __future__ import annotations

from twinkle_core import Register, hookimpl

from twinkle_llm.presets import PRESETS  # plain data: the sizes of each family


@hookimpl
def register_tasks(register: Register) -> None:
    """Causal language modelling (raw text), instruction tuning (conversations), preference tuning (DPO) and
    reinforcement learning (GRPO)."""
    register("causal_lm", kind="generation", monitor="val_loss", mode="min",
             batch="(token ids int64 [B, L], labels int64 [B, L], position ids int64 [B, L])",
             description="predict the next token of raw text (pre-training, continued pre-training)")
    register("instruction_tuning", kind="generation", monitor="val_loss", mode="min",
             batch="(token ids int64 [B, L], labels int64 [B, L] (-100 off the assistant's turns), position ids "
                   "int64 [B, L])",
             description="answer like the assistant of chat conversations (SFT; loss on the assistant's tokens)")
    register("preference_tuning", kind="generation", monitor="val_loss", mode="min",
             batch="(token ids int64 [B, 2, L]: the chosen then the rejected answer, labels int64 [B, 2, L] "
                   "(-100 off the answers))",
             description="prefer the chosen answer over the rejected one (DPO against the starting model)")
    register("reinforcement_learning", kind="generation", monitor="val_reward", mode="max",
             batch="(prompt token ids int64 [B, L] padded on the left, attention mask int64 [B, L], the prompts' "
                   "rows: list of dicts)",
             description="raise the rewards of sampled completions (GRPO: groups of completions per prompt, "
                         "scored by rewards, twinkle rewards list)")


@hookimpl
def register_commands(register: Register) -> None:
    """``twinkle llm`` (``generate``)."""
    register("llm", "twinkle_llm.cli:llm", description="Language models: generate text with a trained run")


TASKS = ["causal_lm", "instruction_tuning", "preference_tuning", "reinforcement_learning"]
"""The tasks every twinkle-llm model serves (``Trainer(..., task=...)``; ``causal_lm`` by default)."""


@hookimpl
def register_algorithms(register: Register) -> None:
    """llm-tiny and the Llama, Qwen2 and Qwen3 families by size."""
    register("llm-tiny", "twinkle_llm.model:LlmTiny", task=TASKS,
             description="a 4-layer Llama for CPU minutes (random init), or any local HF folder with weights=")
    for family, label in (("llama", "Llama"), ("qwen2", "Qwen2.5"), ("qwen3", "Qwen3")):
        sizes = ", ".join(PRESETS[family])
        register(f"{family}-*", f"twinkle_llm.model:{family.capitalize()}", task=TASKS,
                 variant_param="size", variants=list(PRESETS[family]),
                 description=f"{label} by size ({sizes}), random init unless weights= names a local folder")


@hookimpl
def register_data_processors(register: Register) -> None:
    """Raw text, conversations, preferences and prompts: JSONL or Parquet (raw text also .txt), a folder of them,
    or a Hugging Face dataset folder (its train split)."""
    register("text", "twinkle_llm.data:TextProcessor", task="causal_lm",
             formats=["txt", "jsonl", "parquet", "folder", "hf-dataset"],
             description="raw text: documents tokenized (a BPE trained on the data, or the model's) and packed")
    register("chat", "twinkle_llm.data:ChatProcessor", task="instruction_tuning",
             formats=["jsonl", "parquet", "folder", "hf-dataset"],
             description="conversations (OpenAI messages, or prompt/response) in the model's chat template, "
                         "packed whole, trained on the assistant's tokens")
    register("preference", "twinkle_llm.data:PreferenceProcessor", task="preference_tuning",
             formats=["jsonl", "parquet", "folder", "hf-dataset"],
             description="preference pairs (prompt, chosen, rejected) in the model's chat template, for DPO")
    register("prompts", "twinkle_llm.data:PromptProcessor", task="reinforcement_learning",
             formats=["jsonl", "parquet", "folder", "hf-dataset"],
             description="prompts (text, or messages) with the fields their rewards read, for reinforcement learning")


@hookimpl
def register_exporters(register: Register) -> None:
    """Hugging Face model folders (merged), peft adapter folders and GGUF files (llama.cpp)."""
    register("hf", "twinkle_llm.exporting:HuggingFaceExporter", format="hf",
             description="a Hugging Face model folder (safetensors, tokenizer, chat template), LoRA merged")
    register("peft", "twinkle_llm.exporting:PeftExporter", format="peft",
             description="the LoRA adapters alone, as peft loads them onto the base folder")
    register("gguf", "twinkle_llm.gguf_files:GGUFExporter", format="gguf",
             description="one GGUF file for llama.cpp, Ollama, LM Studio (f16/bf16/f32, q8_0 with --quantize), "
                         "tokenizer and chat template inside")


@hookimpl
def register_training_backends(register: Register) -> None:
    """LoRA adapters trained step by step on shared base models (``twinkle serve --tinker``)."""
    register("llm", "twinkle_llm.backend:LoraBackend",
             description="LoRA adapters on local Hugging Face base folders, many per base (the Tinker API)")


@hookimpl
def register_checks(register: Register) -> None:
    """``twinkle doctor``: transformers' model classes (and libsndfile, which they import) and peft."""
    register("transformers", "twinkle_llm.checks:transformers_models",
             description="transformers' Llama/Qwen2/Qwen3 classes and peft import")


@hookimpl
def register_rewards(register: Register) -> None:
    """Verifiable rewards for reinforcement learning on text (``twinkle_llm.rewards``)."""
    register("exact_answer", "twinkle_llm.rewards:ExactAnswer",
             description="1 when the completion's answer is the row's answer (numbers compared as numbers)")
    register("format", "twinkle_llm.rewards:FormatMatch", description="1 when the completion matches a regex")
    register("length_penalty", "twinkle_llm.rewards:LengthPenalty",
             description="0 up to limit characters, then minus the excess as a share of the limit")
