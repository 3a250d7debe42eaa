"""What ``twinkle doctor`` checks for twinkle-llm: transformers loads its language-model classes (it imports its
audio helpers, and so soundfile's libsndfile, on the way) and peft is there for LoRA."""

from __future__ import annotations

from twinkle_core.doctor import Finding


def transformers_models() -> Finding:
    """transformers imports the architectures twinkle-llm trains (Llama, Qwen2, Qwen3), and peft imports."""
    try:
        import transformers
        from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM  # noqa: F401
    except OSError as err:  # a native library transformers reaches for (soundfile's libsndfile)
        return Finding("missing", f"transformers' model classes do not import: {err}",
                       fix="pip install --force-reinstall --only-binary=:all: soundfile (its platform wheel bundles "
                           "libsndfile), or apt-get install libsndfile1")
    except ImportError as err:
        return Finding("missing", f"transformers' model classes do not import: {err}", fix="pip install twinkle-llm")
    try:
        import peft
    except ImportError as err:
        return Finding("missing", f"peft does not import: {err}", fix="pip install twinkle-llm")
    return Finding("ok", f"transformers {transformers.__version__}, peft {peft.__version__}")
