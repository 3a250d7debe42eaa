"""The model sizes twinkle-llm builds from a config (random initialisation): their Hugging Face architecture and
shape. Shapes of the released models are taken from their published ``config.json`` files; the vocabulary is the
data's tokenizer's when a model trains from scratch, the folder's when it starts from a local one."""

from __future__ import annotations

from typing import Any

SUPPORTED = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
"""Hugging Face ``model_type`` → the causal-LM class twinkle-llm trains."""

_LLAMA3 = {"rope_theta": 500000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5}
_QWEN = {"rope_theta": 1000000.0, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # family → size → config keywords (hidden size, MLP width, layers, attention heads, key/value heads, ...)
    "llama": {
        "tiny": {"hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0,
                 "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
        "60m": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8,
                "num_key_value_heads": 8, "max_position_embeddings": 4096, "rope_theta": 10000.0,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
        "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True, **_LLAMA3},
        "3b": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
               "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True, **_LLAMA3},
        "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False, **_LLAMA3},
        "13b": {"hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40, "num_attention_heads": 40,
                "num_key_value_heads": 40, "vocab_size": 32000, "tie_word_embeddings": False, "rope_theta": 10000.0,
                "max_position_embeddings": 4096, "rms_norm_eps": 1e-5},
        "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
                "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False, **_LLAMA3},
    },
    "qwen2": {
        "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                 "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True, **_QWEN},
        "1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                 "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True, **_QWEN},
        "7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False, **_QWEN},
    },
    "qwen3": {
        "0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
                 **_QWEN},
        "1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
                 **_QWEN},
        "4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True, **_QWEN},
        "8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False,
               **_QWEN},
    },
}
"""Every size of every family (``llama-1b``, ``qwen2-0.5b``, ...); ``llm-tiny`` is ``llama``'s ``tiny``."""
