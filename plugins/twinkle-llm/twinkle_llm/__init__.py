"""twinkle-llm: decoder-only language models for Twinkle — Llama, Qwen2 and Qwen3 from a preset config or a
local Hugging Face folder, raw-text pre-training with packed sequences and a BPE tokenizer trained on the data,
instruction tuning (chat templates, loss on the assistant's tokens), DPO and GRPO with LoRA (QLoRA on an NF4 base),
and ``hf``/``peft``/``gguf`` exports.

The Twinkle plugin lives in ``twinkle_llm.plugin``; it is found through the ``twinkle`` entry-point group.
``from twinkle_llm import CausalLM, TextProcessor, ChatProcessor`` imports torch and transformers (on first use).
"""

from __future__ import annotations

import logging
from typing import Any

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-llm")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"


class _TorchaoEnumNote(logging.Filter):
    """Drops torch's note, logged as a warning whenever torchao is imported (peft imports it wherever it is
    installed), that torchao registers enums torch.compile now supports by itself: nothing for a user to do."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is an Enum subclass and is now natively supported by torch.compile" not in record.getMessage()


logging.getLogger("torch.utils._pytree").addFilter(_TorchaoEnumNote())

_LAZY = {"CausalLM": "twinkle_llm.model", "TextProcessor": "twinkle_llm.data", "ChatProcessor": "twinkle_llm.data",
         "PreferenceProcessor": "twinkle_llm.data",
         "ChatTemplate": "twinkle_llm.chat", "PRESETS": "twinkle_llm.presets",
         "bigram_perplexity": "twinkle_llm.baselines"}


def __getattr__(name: str) -> Any:
    """Import the public names (torch, transformers) only when asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'twinkle_llm' has no attribute '{name}'")
