"""GGUF export (``format="gguf"``): one file that llama.cpp, Ollama and LM Studio run, written with the ``gguf``
package's writer (llama.cpp's own Python library) — the weights (LoRA merged; a QLoRA base dequantized first) in
f16, bf16 or f32, or q8_0 with ``quantize=True``; the architecture's settings, the byte-level BPE tokenizer
(tokens, types, merges, special ids) and the chat template as the file's metadata, under llama.cpp's key names.

Verified as every export: the file is read back by transformers' GGUF loading (``from_pretrained(...,
gguf_file=...)``, which nobody here wrote), its logits compared with the run's model on validation windows, and the
tokenizer it rebuilds from the metadata must encode text as the run's does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from twinkle_core.errors import ExportVerificationError
from twinkle_core.exporting import Exporter, ExportError

from twinkle_llm.exporting import DEFAULT_JINJA, LanguageModelExport, logits_runner, merged_network

ARCHITECTURES = ("llama", "qwen2", "qwen3")
"""The ``model_type`` values written (what twinkle-llm trains; llama.cpp's architecture of the same name)."""
OUTTYPES = ("f16", "bf16", "f32")
"""Float types of the weights (``outtype``, as llama.cpp's ``convert_hf_to_gguf.py --outtype``); q8_0 is
``quantize=True``."""
GPT2_SPLIT = "gpt-2"
"""``tokenizer.ggml.pre`` of a byte-level pre-tokenizer with GPT-2's own split (what ``TextTokenizer.train``
builds)."""


class GGUFExporter(Exporter):
    """A GGUF file: weights, settings, tokenizer and chat template; ``quantize=True`` writes q8_0."""

    format = "gguf"
    suffix = ".gguf"
    supports_quantize = True
    calibrates = False  # q8_0 quantizes weights alone
    float_tolerance = 1e-2  # f16 weights (bf16: the same bound holds at the outputs' scale)

    def export(self, model: nn.Module, example: Any, path: str, *, quantize: bool = False,
               calibration: Iterable[np.ndarray] | None = None, **options: Any) -> dict[str, Any]:
        """Write the file, then check that the tokenizer transformers rebuilds from it encodes as the run's.

        Options:
            outtype: ``f16`` (default), ``bf16`` or ``f32`` for the matrices (norms stay f32, as llama.cpp writes
                them); with ``quantize=True`` matrices are q8_0 (those whose rows are not whole 32-value blocks
                f16).

        Raises:
            ExportError: not a language model, an architecture, rope scaling or tokenizer GGUF cannot hold, an
                unknown option; ExportVerificationError: the rebuilt tokenizer encodes differently.
        """
        import gguf

        if not isinstance(model, LanguageModelExport):
            raise ExportError(f"format='gguf' exports twinkle-llm language models, not {type(model).__name__}")
        outtype = options.pop("outtype", "f16")
        if options:
            raise ExportError(f"gguf export takes the option outtype, got {', '.join(sorted(options))}")
        if outtype == "q8_0":
            raise ExportError("outtype='q8_0' is quantize=True for gguf (twinkle export --quantize); outtype takes "
                              f"{', '.join(OUTTYPES)}")
        if outtype not in OUTTYPES:
            raise ExportError(f"outtype={outtype!r} is not a GGUF float type here; use one of {', '.join(OUTTYPES)}, "
                              "or quantize=True for q8_0")
        network = merged_network(model, self.format)
        config = network.config
        arch = _architecture(config)
        writer = gguf.GGUFWriter(path, arch)
        kind = "q8_0" if quantize else outtype
        counts = _write_settings(writer, config, model, kind)
        counts.update(_write_tensors(writer, network, config, arch, kind))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        checked = self._check_tokenizer(path, model, example)
        return {"architecture": arch, "outtype": kind, "merged_lora": model.adapted,
                "dequantized_base": model.quantized_base if model.quantized_base != "none" else None,
                "tokenizer_texts_checked": checked, **counts}

    def _check_tokenizer(self, path: str, model: LanguageModelExport, example: Any) -> int:
        """The file's tokenizer as transformers builds it, against the run's on the example's text and a fixed
        sentence; returns the texts compared."""
        from transformers import AutoTokenizer

        file = Path(path)
        built = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
        ids = example["input_ids"] if isinstance(example, dict) else example
        own = model.tokenizer
        texts = [own.decode([int(i) for i in ids[0] if int(i) not in own.stop_ids and int(i) != own.pad_id]),
                 "The quick brown fox jumps over 13 lazy dogs: naïve café, ünïcödé!\n\tTabs and  spaces."]
        for text in texts:
            expected, got = own.encode(text), built(text, add_special_tokens=False)["input_ids"]
            if expected != got:
                raise ExportVerificationError(
                    f"the GGUF file's tokenizer encodes {text[:40]!r} as {got[:8]}... but the run's as "
                    f"{expected[:8]}...; the artefact was not written")
        return len(texts)

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray]:
        """transformers' ``AutoModelForCausalLM.from_pretrained`` of the GGUF file (dequantized to fp32). Its
        GGUF reader takes Qwen3's head size from no key (it assumes 128, as the released Qwen3 models have), so the
        file's own ``qwen3.attention.key_length`` is passed on to it."""
        from gguf import GGUFReader
        from transformers import AutoModelForCausalLM

        file = Path(path)
        reader = GGUFReader(str(file))
        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        extra = {}
        if arch == "qwen3":
            field = reader.fields[f"{arch}.attention.key_length"]
            extra["head_dim"] = int(field.parts[field.data[0]][0])
        return logits_runner(lambda: AutoModelForCausalLM.from_pretrained(
            str(file.parent), gguf_file=file.name, local_files_only=True, dtype=torch.float32, **extra))


def _architecture(config: Any) -> str:
    """The GGUF architecture of a transformers config.

    Raises:
        ExportError: a model type or rope scaling GGUF export does not write.
    """
    arch = getattr(config, "model_type", None)
    if arch not in ARCHITECTURES:
        raise ExportError(f"format='gguf' writes {', '.join(ARCHITECTURES)} models; this run's is {arch!r}: export "
                          "format='hf' instead")
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else "default"
    if kind not in ("default", None):
        raise ExportError(f"format='gguf': this {arch} model uses rope scaling {kind!r}, which the GGUF export does "
                          "not write yet; export format='hf' and convert it with llama.cpp's convert_hf_to_gguf.py")
    return str(arch)


def _write_settings(writer: Any, config: Any, model: LanguageModelExport, kind: str) -> dict[str, Any]:
    """The architecture's settings, the file type, the tokenizer and the chat template."""
    import gguf

    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    writer.add_name(str(getattr(config, "_name_or_path", "") or f"twinkle-{config.model_type}"))
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(getattr(config, "num_key_value_heads", None) or heads))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_freq_base(float(_rope_theta(config)))
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_vocab_size(int(config.vocab_size))
    file_types = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                  "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    writer.add_file_type(file_types[kind])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens = _write_tokenizer(writer, model, int(config.vocab_size))
    writer.add_chat_template(model.chat_template.jinja or DEFAULT_JINJA)
    return {"vocabulary": tokens}


def _rope_theta(config: Any) -> float:
    theta = getattr(config, "rope_theta", None)
    if theta is None:  # transformers 5 keeps it in rope_parameters
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return float(theta)


def _write_tokenizer(writer: Any, model: LanguageModelExport, vocab_size: int) -> int:
    """The byte-level BPE as llama.cpp's ``gpt2`` tokenizer model: every id's token (padded to the embedding's
    rows), its type (control for special tokens), the merges in order, the end, padding and chat-turn ids.

    Raises:
        ExportError: a tokenizer that is not byte-level BPE, or a pre-tokenizer split GGUF has no name for.
    """
    import gguf

    tokenizer = model.tokenizer
    spec = json.loads(tokenizer.backend.to_str())
    if (spec.get("model") or {}).get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("pre_tokenizer")):
        raise ExportError("format='gguf' writes byte-level BPE tokenizers (GPT-2, Llama 3, Qwen); this run's is "
                          f"{(spec.get('model') or {}).get('type')!r}: export format='hf' instead")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer(spec.get("pre_tokenizer")))
    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    by_id = {index: token for token, index in vocab.items()}
    special = {added["id"] for added in spec.get("added_tokens", []) if added.get("special")}
    tokens, types = [], []
    for index in range(vocab_size):
        token = by_id.get(index)
        if token is None:  # embedding rows past the tokenizer's ids (a padded vocabulary)
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL if index in special else gguf.TokenType.NORMAL)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    merges = spec["model"].get("merges") or []
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_eos_token_id(int(tokenizer.eos_id))
    writer.add_pad_token_id(int(tokenizer.pad_id))
    writer.add_add_bos_token(False)
    turn_end = tokenizer.turn_end_id()
    if turn_end is not None and turn_end != tokenizer.eos_id:
        writer.add_eot_token_id(int(turn_end))
    return len(tokens)


_SPLITS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+",
}
"""llama.cpp's names of the pre-tokenizer splits of Qwen2/Qwen3 and Llama 3 (their ``tokenizer.json`` regexes)."""


def _pre_tokenizer(pre: Any) -> str:
    """llama.cpp's ``tokenizer.ggml.pre`` name of a ``tokenizer.json`` pre-tokenizer.

    Raises:
        ExportError: a split llama.cpp has no name for here.
    """
    if isinstance(pre, dict) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return GPT2_SPLIT
    found = re.findall(r'"Regex":\s*"((?:[^"\\]|\\.)*)"', json.dumps(pre))
    for name, split in _SPLITS.items():
        if found and json.loads(f'"{found[0]}"') == split:
            return name
    raise ExportError("format='gguf': the tokenizer's pre-tokenizer split is not one llama.cpp names here (GPT-2's, "
                      "Qwen2's, Llama 3's); export format='hf' and convert it with llama.cpp's convert_hf_to_gguf.py")


def _write_tensors(writer: Any, network: nn.Module, config: Any, arch: str, kind: str) -> dict[str, Any]:
    """Every weight under its GGUF name; Llama's query and key rows in GGML's rope order (as llama.cpp's
    converter permutes them); a tied output head written once (as the token embedding)."""
    import gguf

    arch_enum = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3}[arch]
    names = gguf.get_tensor_name_map(arch_enum, int(config.num_hidden_layers))
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    counts = {"tensors": 0, "q8_0_tensors": 0}
    for name, tensor in network.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        if name.endswith("rotary_emb.inv_freq"):
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ExportError(f"format='gguf': the weight {name!r} has no GGUF name for {arch}")
        data = tensor.detach().float().cpu().numpy()
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _permute(data, heads, heads)
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _permute(data, heads, kv_heads)
        if data.ndim == 1 or kind == "f32":
            writer.add_tensor(gguf_name, data.astype(np.float32))
        elif kind == "q8_0" and data.shape[-1] % 32 == 0:
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(gguf_name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            counts["q8_0_tensors"] += 1
        elif kind == "bf16":
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.BF16)
            writer.add_tensor(gguf_name, packed, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            writer.add_tensor(gguf_name, data.astype(np.float16))
        counts["tensors"] += 1
    return counts


def _permute(weights: np.ndarray, heads: int, kv_heads: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``: each head's rows from Hugging Face's rotate-half order to GGML's
    interleaved pairs."""
    if kv_heads != heads:
        heads = kv_heads
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))
