"""QLoRA and GGUF (issue 56): a LoRA run on a base stored in NF4 (torchao) learns as the same run on the
full-precision base does, its plan says how the base is stored and what it weighs, and every export of it — the
merged folder, the adapters, GGUF in f16 and q8_0 — reproduces what it trained. GGUF files of each architecture
twinkle-llm trains are read back by transformers' GGUF loader (not ours) to the same logits and tokenizer; bad
requests are named errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from twinkle_core import Trainer
from twinkle_core.cli import main
from twinkle_core.errors import HyperparameterError
from twinkle_core.exporting import ExportError
from twinkle_llm.exporting import DEFAULT_JINJA
from twinkle_llm.samples import write_conversations

pytestmark = pytest.mark.slow


def _fit(base: str, data: Path, quantize: str) -> tuple[Trainer, Any]:
    trainer = Trainer("llm-tiny", task="instruction_tuning", progress_bar=False, verbose=False, hyperparams={
        "weights": base, "lora_rank": 8, "quantize_base": quantize, "max_steps": 100, "batch_size": 8,
        "val_generations": 0, "seed": 0, "precision": "32-true"})
    return trainer, trainer.fit(str(data))


def _gguf_model(path: str) -> Any:
    from twinkle_llm.gguf_files import GGUFExporter

    return GGUFExporter().runner(path)


def test_qlora_learns_as_lora_does_and_every_export_reproduces_it(
        tmp_path: Path, twinkle_home: Path, base_folder: Any, opposites: tuple[list[Any], list[Any]]) -> None:
    """The same 100 steps of LoRA instruction tuning (the opposites chats) on the pre-trained llm-tiny, its base in
    fp32 and in NF4: the NF4 run's validation loss is within 5 % of the full-precision run's (both below 2; measured
    1.350 and 1.356), the plan's ``quantize_base``
    decision gives the base's NF4 bytes against bf16 (≤ 0.3) and the planner's training state counts the smaller
    base. The QLoRA run continued from its checkpoint (the base quantized again, the adapters loaded) goes on from
    its loss, and generates; its ``hf`` export is the dequantized base with the adapters merged and matches the run within 1e-4,
    its ``peft`` adapters on the base stored in NF4 again match exactly, and its GGUF files read by transformers give
    logits within 1e-2 (f16) and the same greedy answers to eight prompts (q8_0, up to 16 tokens each), with the chat template and architecture in the
    file's metadata (read by ``gguf``'s own reader); ``twinkle export --format gguf --outtype bf16`` writes the bf16
file. An output below a file is refused. (Precision is pinned to fp32:
    the speed probe's choice would add its own difference to the two runs.)"""
    import gguf
    from transformers import AutoTokenizer

    train, _ = opposites
    data = write_conversations(tmp_path / "opposites.jsonl", train)
    lora, lora_result = _fit(base_folder.path, data, "none")
    qlora, qlora_result = _fit(base_folder.path, data, "nf4")

    full_loss, nf4_loss = lora_result.metrics["val_loss"], qlora_result.metrics["val_loss"]
    print(f"validation loss: LoRA {full_loss:.4f}, QLoRA {nf4_loss:.4f}")
    assert full_loss < 2.0 and abs(nf4_loss - full_loss) <= 0.05 * full_loss
    decisions = {d.name: d for d in qlora_result.plan.decisions}
    assert decisions["quantize_base"].value == "nf4"
    share = float(re.search(r"in bf16 \((0\.\d+)\)", decisions["quantize_base"].reason).group(1))
    assert share <= 0.3, decisions["quantize_base"].reason
    assert {d.name: d for d in lora_result.plan.decisions}["quantize_base"].value == "none"  # auto: it fits
    assert qlora_result.plan.estimates["state_bytes"] < lora_result.plan.estimates["state_bytes"]

    continued = Trainer.from_checkpoint(qlora_result.run_uri, mode="continue", hyperparams={"max_steps": 20},
                                        progress_bar=False, verbose=False)
    more = continued.fit()
    assert {d.name: d.value for d in more.plan.decisions}["quantize_base"] == "nf4"
    assert more.metrics["val_loss"] <= nf4_loss * 1.02  # the adapters went on from where they were, on the same base
    assert isinstance(qlora.generate([{"role": "user", "content": train[0][0]}], max_new_tokens=8), str)

    merged = qlora.export(format="hf", output=str(tmp_path / "merged"))
    assert merged.details["dequantized_base"] == "nf4" and merged.max_abs_diff < 1e-4
    adapters = qlora.export(format="peft", output=str(tmp_path / "adapters"))
    assert adapters.details["trained_on_base"] == "nf4" and adapters.max_abs_diff < 1e-4

    f16 = qlora.export(format="gguf", output=str(tmp_path / "model.gguf"))
    print(f"gguf f16: max |Δlogit| {f16.max_abs_diff:.2e}, {f16.size_bytes} bytes")
    assert f16.max_abs_diff < 1e-2 and f16.details["merged_lora"] and f16.details["tokenizer_texts_checked"] == 2
    reader = gguf.GGUFReader(str(tmp_path / "model.gguf"))
    field = reader.fields["tokenizer.chat_template"]
    assert bytes(field.parts[field.data[0]]).decode() == DEFAULT_JINJA
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
    assert {t.tensor_type.name for t in reader.tensors} == {"F16", "F32"}

    q8 = qlora.export(format="gguf", quantize=True, output=str(tmp_path / "model-q8_0.gguf"))
    assert q8.details["outtype"] == "q8_0" and q8.details["q8_0_tensors"] > 0 and q8.size_bytes < f16.size_bytes
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="model-q8_0.gguf", local_files_only=True)
    from transformers import AutoModelForCausalLM

    read = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="model-q8_0.gguf", local_files_only=True,
                                                dtype=torch.float32)
    run_model, stops = qlora.algorithm.model.eval(), list(qlora.algorithm.tokenizer.stop_ids)
    options = {"do_sample": False, "max_new_tokens": 16, "eos_token_id": stops, "pad_token_id": stops[0]}
    compared = 0
    for question, _ in train[:8]:  # each answer and its end, as the file's own tokenizer encodes the prompt
        text = qlora.algorithm.chat_template.render([{"role": "user", "content": question}], add_generation_prompt=True)
        prompt = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            ours = run_model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **options)
            theirs = read.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **options)
        assert ours[0, prompt.shape[1]:].tolist() == theirs[0, prompt.shape[1]:].tolist(), question
        compared += ours.shape[1] - prompt.shape[1]
    assert compared >= 16

    said = CliRunner().invoke(main, ["export", qlora_result.run_uri, "--format", "gguf", "--outtype", "bf16",
                                     "-o", str(tmp_path / "cli"), "--json"])
    assert said.exit_code == 0, said.output
    assert json.loads(said.stdout)["details"]["outtype"] == "bf16" and (tmp_path / "cli.gguf").is_file()

    (tmp_path / "notes.txt").write_text("a file where a folder would go")
    with pytest.raises(ExportError, match="is a file, not a folder"):
        qlora.export(format="gguf", output=str(tmp_path / "notes.txt" / "model.gguf"))


def _tiny(model_type: str) -> Any:
    """A random 2-layer model of ``model_type`` (Qwen3 with a head size of its own), with a byte-level BPE."""
    from transformers import AutoModelForCausalLM

    from twinkle_llm.model import build_config
    from twinkle_llm.tokenizing import TextTokenizer

    tokenizer = TextTokenizer.train([f"Count {n} and spell {n * 7} backwards, naïve café" for n in range(300)], 320)
    settings = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": tokenizer.vocab_size, "max_position_embeddings": 256,
                "tie_word_embeddings": model_type != "llama"}
    if model_type == "qwen3":
        settings["head_dim"] = 32
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(build_config(model_type, settings), dtype=torch.float32).eval(), tokenizer


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_a_gguf_file_of_each_architecture_reads_back_as_the_model(tmp_path: Path, model_type: str) -> None:
    """Llama (its query and key rows permuted into GGML's rope order, an untied head), Qwen2 (query, key and value
    biases) and Qwen3 (query and key norms, a head size that is not hidden / heads): transformers' GGUF loading of
    the f16 file gives the model's logits within 1e-2, and of the f32 file within 1e-4."""
    from twinkle_llm.chat import ChatTemplate
    from twinkle_llm.exporting import LanguageModelExport
    from twinkle_llm.gguf_files import GGUFExporter

    model, tokenizer = _tiny(model_type)
    if model_type == "qwen2":  # biases that are not zero, so that their names and order are checked
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    lm = LanguageModelExport(model, tokenizer, ChatTemplate.for_folder(None, tokenizer.eos_text))
    ids = torch.tensor([tokenizer.encode("Count 17 and spell 119 backwards")])
    with torch.no_grad():
        expected = model(input_ids=ids).logits.numpy()
    for outtype, tolerance in (("f16", 1e-2), ("f32", 1e-4)):
        path = str(tmp_path / f"{model_type}-{outtype}.gguf")
        details = GGUFExporter().export(lm, {"input_ids": ids}, path, outtype=outtype)
        assert details["architecture"] == model_type and details["outtype"] == outtype
        got = _gguf_model(path)({"input_ids": ids.numpy()})
        assert abs(got - expected).max() < tolerance, (outtype, abs(got - expected).max())


def test_bad_qlora_and_gguf_requests_are_named_errors(tmp_path: Path, small_base: Path) -> None:
    """``quantize_base`` without adapters, bitsandbytes where it is missing, an architecture, rope scaling or
    outtype GGUF does not write, a merged export of a bitsandbytes base: each a named error with the fix, before
    anything is written. ``auto`` chooses NF4
    only where the fp32 base would take more than half of the device's memory; a given value is kept."""
    from transformers import AutoModelForCausalLM, MistralConfig

    from twinkle_llm.exporting import LanguageModelExport
    from twinkle_llm.gguf_files import GGUFExporter
    from twinkle_llm.model import LlmTiny
    from twinkle_llm.quantized import choose

    with pytest.raises(HyperparameterError, match="stores the frozen base of a LoRA run, but lora_rank is 0"):
        LlmTiny(weights=str(small_base), quantize_base="nf4")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        with pytest.raises(HyperparameterError, match="needs bitsandbytes, which is not installed"):
            LlmTiny(weights=str(small_base), lora_rank=4, quantize_base="bnb-nf4")
    assert choose("auto", 10**9, 16 * 2**30)[0] == "none"  # 4 GB of fp32 in 16 GiB
    value, reason = choose("auto", 3 * 10**9, 16 * 2**30)  # 12 GB of fp32 in 16 GiB
    assert value == "nf4" and "does not fit" in reason
    assert choose("none", 3 * 10**9, 16 * 2**30)[0] == "none"  # pinned: kept

    model, tokenizer = _tiny("llama")
    from twinkle_llm.chat import ChatTemplate

    template = ChatTemplate.for_folder(None, tokenizer.eos_text)
    lm = LanguageModelExport(model, tokenizer, template)
    ids = {"input_ids": torch.tensor([[1, 2, 3]])}
    path = str(tmp_path / "x.gguf")
    with pytest.raises(ExportError, match="outtype='q8_0' is quantize=True"):
        GGUFExporter().export(lm, ids, path, outtype="q8_0")
    with pytest.raises(ExportError, match="outtype='q4_k' is not a GGUF float type"):
        GGUFExporter().export(lm, ids, path, outtype="q4_k")
    model.config.rope_parameters = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 10000.0}
    with pytest.raises(ExportError, match="rope scaling 'llama3'"):
        GGUFExporter().export(lm, ids, path)
    mistral = AutoModelForCausalLM.from_config(MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                             num_attention_heads=4, num_key_value_heads=2,
                                                             vocab_size=tokenizer.vocab_size))
    with pytest.raises(ExportError, match="writes llama, qwen2, qwen3 models; this run's is 'mistral'"):
        GGUFExporter().export(LanguageModelExport(mistral, tokenizer, template), ids, path)
    assert not Path(path).exists()
    from twinkle_llm.exporting import HuggingFaceExporter

    on_bnb = LanguageModelExport(model, tokenizer, template, quantized_base="bnb-nf4")
    for exporter in (GGUFExporter(), HuggingFaceExporter()):  # bitsandbytes' 4-bit is not dequantized for merging
        with pytest.raises(ExportError, match="kept in bitsandbytes' 4-bit: export format='peft'"):
            exporter.export(on_bnb, ids, str(tmp_path / "bnb"))
