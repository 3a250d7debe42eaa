"""Exports of twinkle-llm models in the formats the Hugging Face stack loads, each verified like every Twinkle
export (its logits against the trained model's on validation windows):

- ``hf``: a model folder (``config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``
  with the chat template, ``generation_config.json``); LoRA adapters are merged into the weights.
  ``AutoModelForCausalLM.from_pretrained(folder)`` loads it, and so does ``weights=folder``.
- ``peft``: the LoRA adapters alone (``adapter_config.json`` naming the base folder, ``adapter_model.safetensors``),
  which ``peft.PeftModel.from_pretrained(base, folder)`` puts onto the base.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from twinkle_core.exporting import Exporter, ExportError

from twinkle_llm.chat import ChatTemplate
from twinkle_llm.tokenizing import TextTokenizer

DEFAULT_JINJA = ("{% for m in messages %}### {{ m['role'] | capitalize }}:{{ '\\n' }}{{ m['content'] }}"
                 "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}### Assistant:{{ '\\n' }}{% endif %}")
"""``twinkle_llm.chat``'s default template in Jinja, written into an exported folder's ``tokenizer_config.json``
(so that ``apply_chat_template`` renders conversations as training did)."""


class LanguageModelExport(nn.Module):
    """What exporters receive from a ``CausalLM``: the network (``forward``: token ids → logits) and what a
    folder needs beside the weights.

    Attributes:
        network: the transformers model (a ``peft.PeftModel`` for a LoRA run).
        tokenizer: the run's tokenizer.
        chat_template: the run's chat template (the default one, or its model folder's).
        quantized_base: how the run stored its frozen base while training (``nf4``, ``bnb-nf4``, ``none``);
            ``network`` holds its dequantized values.
    """

    def __init__(self, network: nn.Module, tokenizer: TextTokenizer, chat_template: ChatTemplate,
                 quantized_base: str = "none") -> None:
        """Wrap ``network``."""
        super().__init__()
        self.network = network
        self.tokenizer, self.chat_template = tokenizer, chat_template
        self.quantized_base = quantized_base

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The logits ``[B, L, vocab]`` of ``input_ids`` (one causal sequence per row; the all-ones attention mask
        keeps transformers from looking for packed documents in the positions, which no exporter can trace)."""
        return self.network(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits

    @property
    def adapted(self) -> bool:
        """Whether the network carries LoRA adapters."""
        return hasattr(self.network, "peft_config")

    def write_tokenizer(self, folder: Path) -> None:
        """``tokenizer.json`` and a ``tokenizer_config.json`` naming its special tokens and chat template."""
        tokenizer = self.tokenizer
        tokenizer.backend.save(str(folder / "tokenizer.json"))
        template = self.chat_template.jinja or DEFAULT_JINJA
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": tokenizer.eos_text,
                  "pad_token": str(tokenizer.backend.id_to_token(tokenizer.pad_id)),
                  **self.chat_template.tokens,  # a model folder's own special tokens, as its template names them
                  "chat_template": template,
                  "model_max_length": int(getattr(self.network.config, "max_position_embeddings", 2048))}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))

    def write_generation_config(self, folder: Path) -> None:
        """Where generation ends, as transformers and the servers built on it read it: ``generation_config.json``'s
        ``eos_token_id`` lists every id the run stops at (the end-of-text token, the tokenizer's ``eos_token``, the
        chat template's end of turn), with the padding id; ``config.json`` names the end-of-text id where it named
        none."""
        tokenizer = self.tokenizer
        stops = list(tokenizer.stop_ids)
        path = folder / "generation_config.json"
        generation = json.loads(path.read_text()) if path.is_file() else {}
        generation.update(eos_token_id=stops if len(stops) > 1 else stops[0], pad_token_id=tokenizer.pad_id)
        path.write_text(json.dumps(generation, indent=2) + "\n")
        config_path = folder / "config.json"
        config = json.loads(config_path.read_text())
        if config.get("eos_token_id") is None or config.get("pad_token_id") is None:
            config["eos_token_id"] = config.get("eos_token_id") if config.get("eos_token_id") is not None \
                else tokenizer.eos_id
            config["pad_token_id"] = config.get("pad_token_id") if config.get("pad_token_id") is not None \
                else tokenizer.pad_id
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def logits_runner(load: Callable[[], nn.Module]) -> Callable[[np.ndarray], np.ndarray]:
    """An exporter's ``runner``: the model ``load`` returns, in eval mode, from token ids to fp32 logits."""
    model = load().eval()

    def run(batch: Any) -> np.ndarray:
        ids = torch.as_tensor(batch["input_ids"] if isinstance(batch, dict) else batch)
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits.float().numpy()

    return run


def merged_network(lm: LanguageModelExport, format: str) -> nn.Module:
    """``lm``'s network with its LoRA adapters merged into a copy of the weights (the network itself where it has
    none).

    Raises:
        ExportError: the base is bitsandbytes' 4-bit, which is not dequantized for a merged export yet.
    """
    if lm.quantized_base == "bnb-nf4":
        raise ExportError(f"format='{format}' merges the adapters into the base, which this run kept in "
                          "bitsandbytes' 4-bit: export format='peft' (the adapters alone), or train with "
                          "quantize_base='nf4' (torchao), whose base every export dequantizes")
    return copy.deepcopy(lm.network).merge_and_unload() if lm.adapted else lm.network


def _checked(model: nn.Module, quantize: bool, options: dict[str, Any], format: str) -> LanguageModelExport:
    if not isinstance(model, LanguageModelExport):
        raise ExportError(f"format='{format}' exports twinkle-llm language models, not {type(model).__name__}")
    if quantize:
        raise ExportError(f"quantize=True is not supported for {format}; export format='onnx' for INT8")
    if options:
        raise ExportError(f"{format} export takes no options, got {', '.join(sorted(options))}")
    return model


class HuggingFaceExporter(Exporter):
    """A Hugging Face model folder (safetensors), LoRA adapters merged into the weights."""

    format = "hf"
    suffix = "-hf"
    folder = True

    def export(self, model: nn.Module, example: Any, path: str, *, quantize: bool = False,
               calibration: Iterable[np.ndarray] | None = None, **options: Any) -> dict[str, Any]:
        """Write the folder: the weights (merged when LoRA trained), config, generation config and tokenizer."""
        lm = _checked(model, quantize, options, self.format)
        network = merged_network(lm, self.format)
        folder = Path(path)
        network.save_pretrained(folder, safe_serialization=True)
        lm.write_tokenizer(folder)
        lm.write_generation_config(folder)
        return {"merged_lora": lm.adapted, "parameters": sum(p.numel() for p in network.parameters()),
                "architecture": type(network).__name__,
                "dequantized_base": lm.quantized_base if lm.quantized_base != "none" else None}

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray]:
        """``AutoModelForCausalLM.from_pretrained`` of the folder (local files, fp32)."""
        from transformers import AutoModelForCausalLM

        return logits_runner(lambda: AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                                    use_safetensors=True, dtype=torch.float32))


class PeftExporter(Exporter):
    """The LoRA adapters alone, in peft's folder format (the base is the run's ``weights`` folder)."""

    format = "peft"
    suffix = "-peft"
    folder = True

    def __init__(self) -> None:
        """An exporter with nothing written yet."""
        self._base_quantized = "none"

    def export(self, model: nn.Module, example: Any, path: str, *, quantize: bool = False,
               calibration: Iterable[np.ndarray] | None = None, **options: Any) -> dict[str, Any]:
        """Write ``adapter_config.json``, ``adapter_model.safetensors`` and the tokenizer."""
        lm = _checked(model, quantize, options, self.format)
        if not lm.adapted:
            raise ExportError("this run trained every weight, so it has no adapters to export alone; use "
                              "format='hf' (or train with lora_rank=...)")
        folder = Path(path)
        lm.network.save_pretrained(folder, safe_serialization=True)
        lm.write_tokenizer(folder)
        config = json.loads((folder / "adapter_config.json").read_text())
        self._base_quantized = lm.quantized_base
        return {"base": config.get("base_model_name_or_path"), "rank": config.get("r"),
                "adapter_parameters": sum(p.numel() for p in lm.network.parameters() if p.requires_grad),
                "trained_on_base": lm.quantized_base if lm.quantized_base != "none" else "full precision"}

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray]:
        """The base folder the adapter names, loaded, with ``PeftModel.from_pretrained`` of the adapter; the base
        of adapters trained on an NF4 base stored in NF4 again (``twinkle_llm.quantized.load_nf4``: the same
        blocks, so the same values as in training), on a bitsandbytes base loaded in bitsandbytes' 4-bit again."""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        base = json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"]

        def load() -> nn.Module:
            if self._base_quantized == "nf4":
                from twinkle_llm.quantized import load_nf4

                network = load_nf4(base)[0]
            else:
                options: dict[str, Any] = {"dtype": torch.float32}
                if self._base_quantized == "bnb-nf4":
                    from twinkle_llm.quantized import bnb_options, require_bitsandbytes

                    require_bitsandbytes()
                    options = {"dtype": torch.bfloat16, **bnb_options()}
                network = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, use_safetensors=True,
                                                               **options)
            return PeftModel.from_pretrained(network, path, local_files_only=True)

        return logits_runner(load)
