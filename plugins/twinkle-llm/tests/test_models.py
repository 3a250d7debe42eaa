"""Models from presets and from local Hugging Face folders: a folder's weights are what training starts from, a
pickled or foreign folder is refused by name before anything loads, and a tiny Llama learns the CPython docs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.errors import HyperparameterError, TwinkleError, UnknownComponentError
from twinkle_llm.folders import ModelFolderError

pytestmark = pytest.mark.slow


def _qwen_folder(folder: Path, topics: Path) -> Path:
    """A small Qwen2 saved as Hugging Face saves it (config.json, model.safetensors) with a tokenizer.json."""
    from transformers import AutoModelForCausalLM

    from twinkle_llm.model import build_config
    from twinkle_llm.tokenizing import TextTokenizer

    texts = [json.loads(line)["text"] for line in topics.read_text().splitlines()]
    tokenizer = TextTokenizer.train(texts, 400)
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(build_config("qwen2", {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": tokenizer.vocab_size, "eos_token_id": tokenizer.eos_id,
        "tie_word_embeddings": True}))
    model.save_pretrained(folder)
    tokenizer.backend.save(str(folder / "tokenizer.json"))
    return folder


def test_a_local_qwen_folder_is_where_training_starts(twinkle_home: Path, tmp_path: Path, topics: Path) -> None:
    from safetensors.torch import load_file

    folder = _qwen_folder(tmp_path / "qwen", topics)
    saved = load_file(folder / "model.safetensors")
    trainer = Trainer("qwen2-0.5b", hyperparams={"weights": str(folder), "max_epochs": 1, "max_seq_len": 64,
                                                 "lr": 1e-12}, progress_bar=False, verbose=False)
    result = trainer.fit(str(topics))
    net = trainer.algorithm.model
    assert net.config.model_type == "qwen2" and net.config.hidden_size == 32  # the folder's shape, not 0.5B's
    assert torch.allclose(net.state_dict()["model.layers.0.mlp.up_proj.weight"],
                          saved["model.layers.0.mlp.up_proj.weight"], atol=1e-6)  # its weights (lr ~ 0)
    assert trainer.algorithm.data_spec.extra["tokenizer"] == str(folder)  # its tokenizer, not a new BPE
    assert next(d for d in result.plan.decisions if d.name == "tokenizer").reason.startswith(f"{folder}'s own")


def test_folders_that_would_run_code_or_are_not_supported_are_refused(twinkle_home: Path, tmp_path: Path,
                                                                        topics: Path) -> None:
    """Each refusal names the folder and the fix, and comes before any run is created."""
    def fit(name: str, **hyperparams: object) -> None:
        Trainer(name, hyperparams=hyperparams, verbose=False).fit(str(topics))

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (pickled / "pytorch_model.bin").write_bytes(b"not opened")
    with pytest.raises(ModelFolderError, match=r"only pickled weights \(pytorch_model\.bin\); they are never unpickled"):
        fit("llm-tiny", weights=str(pickled))
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelFolderError, match="is a 'gpt2' model; twinkle-llm trains llama, qwen2, qwen3"):
        fit("llm-tiny", weights=str(gpt2))
    with pytest.raises(ModelFolderError, match="is not a local folder"):
        fit("llm-tiny", weights="/no/such/model")
    folder = _qwen_folder(tmp_path / "qwen", topics)
    with pytest.raises(HyperparameterError, match="is a qwen2 model, not llama; use qwen2-<size> or llm-tiny"):
        fit("llama-1b", weights=str(folder))
    with pytest.raises(UnknownComponentError, match="unknown algorithm 'qwen3-2b': the family 'qwen3-\\*' of plugin "
                                                     "'llm' has 'qwen3-0.6b', 'qwen3-1.7b'"):
        fit("qwen3-2b")  # refused by name when the Trainer is made, before any data is read
    # adapters to start from: a pickled one, one whose rank contradicts lora_rank, one without a base
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                             "target_modules": ["q_proj", "v_proj"]}))
    (adapter / "adapter_model.bin").write_bytes(b"not opened")
    with pytest.raises(ModelFolderError, match="no adapter_model.safetensors .it holds adapter_model.bin, which is "
                                               "never unpickled"):
        fit("qwen2-0.5b", weights=str(folder), adapter=str(adapter))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(HyperparameterError, match="'lora_rank' = 8 but adapter '.*' has 4; drop 'lora_rank'"):
        fit("qwen2-0.5b", weights=str(folder), adapter=str(adapter), lora_rank=8)
    with pytest.raises(HyperparameterError, match="'adapter' = .* adapts a base model, but 'weights' names none"):
        fit("llm-tiny", adapter=str(adapter))
    with pytest.raises(HyperparameterError, match="'lora_alpha' = 16 and 'lora_targets' = 'q_proj' configure LoRA "
                                                  "adapters, but lora_rank is 0"):  # silently ignored before
        fit("qwen2-0.5b", weights=str(folder), lora_alpha=16, lora_targets="q_proj")
    assert RunStore().list() == []


def test_a_folder_whose_weights_do_not_fit_its_config_is_named(small_base: Path, tmp_path: Path) -> None:
    """Weights saved from one model beside another's config.json (here: a wider MLP in the config) are a
    ModelFolderError naming the folder, the tensor and the fix — not transformers' RuntimeError asking for
    ignore_mismatched_sizes."""
    import shutil

    from twinkle_llm.folders import load_folder_model

    folder = tmp_path / "mismatched"
    shutil.copytree(small_base, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": config["intermediate_size"] * 2}))
    with pytest.raises(ModelFolderError, match=r"mismatched': its \*\.safetensors weights do not fit its "
                                               r"config\.json \(.*mlp.*\); the two come from different models"):
        load_folder_model(folder)


def test_llm_tiny_beats_a_bigram_on_held_out_python_docs(pretrained: tuple, topics: Path) -> None:
    """Trained from scratch (the ``pretrained`` fixture; after 4 epochs it is still above the bigram): held-out
    perplexity below the best interpolated bigram's on exactly the same tokens, and continuations that are
    reproducible (greedy, and sampled for a seed)."""
    from twinkle_core.data import ModelInput, PrepareContext
    from twinkle_llm.baselines import bigram_perplexity, unigram_perplexity
    from twinkle_llm.data import TextProcessor

    trainer, result = pretrained
    spec = trainer.algorithm.data_spec
    data = TextProcessor(max_seq_len=128, vocab_size=1024).prepare(
        str(topics), PrepareContext(seed=0, model_input=ModelInput(tokenizer=spec.extra["tokenizer"])))
    bigram = bigram_perplexity(data.train, data.val, spec.vocab_size)
    unigram = unigram_perplexity(data.train, data.val, spec.vocab_size)
    print(result.metrics, "bigram", bigram, "unigram", unigram)
    assert result.metrics["val_perplexity"] < bigram < unigram
    assert result.metrics["val_loss"] == pytest.approx(math.log(result.metrics["val_perplexity"]), abs=1e-3)
    text = trainer.algorithm.generate("The ", max_new_tokens=20)
    assert text and text == trainer.algorithm.generate("The ", max_new_tokens=20)
    sampled = trainer.algorithm.generate("The ", max_new_tokens=20, temperature=1.0, seed=3)
    assert sampled == trainer.algorithm.generate("The ", max_new_tokens=20, temperature=1.0, seed=3)
    with pytest.raises(TwinkleError, match="max_new_tokens = 0"):
        trainer.algorithm.generate("The ", max_new_tokens=0)


def test_every_validation_writes_the_models_own_generations_and_the_plan_explains_memory(pretrained: tuple) -> None:
    """Each of the ``pretrained`` run's six validations wrote two held-out prompts with the model's greedy
    continuation and the text's own, and the last file's continuations are what the final model writes; the
    plan's ``memory`` line adds up weights, gradients, AdamW moments and activations per token × window."""
    trainer, result = pretrained
    written = sorted((Path(result.run_dir) / "generations").glob("step-*.jsonl"))
    assert len(written) == 6
    records = [json.loads(line) for line in written[-1].read_text().splitlines()]
    assert len(records) == 2 and all(r["prompt"] and r["reference"] and r["epoch"] == 5 for r in records)
    model = trainer.algorithm
    for record in records:
        ids = model.tokenizer.encode(record["prompt"])
        assert model.tokenizer.decode(model.continue_ids(ids, 32)) == record["generated"]
    memory = next(d for d in result.plan.decisions if d.name == "memory")
    assert "per token × 128 tokens × 8" in memory.reason and "16 B ×" in memory.reason


def test_an_onnx_export_of_llm_tiny_gives_its_logits_at_any_batch_and_length(pretrained: tuple,
                                                                              tmp_path: Path) -> None:
    """``format="onnx"``: one graph whose ``input_ids`` take any batch and length, verified on the held-out
    windows (max |Δ| ≤ 1e-4, the same next-token accuracy) and matching the model at lengths it was not traced at."""
    import numpy as np
    import onnxruntime as ort

    trainer, _ = pretrained
    exported = trainer.export(format="onnx", output=str(tmp_path / "llm-tiny.onnx"))
    assert exported.max_abs_diff <= 1e-4 and exported.metric_export == exported.metric_torch
    assert exported.details["input"] == ["input_ids"]
    session = ort.InferenceSession(exported.path, providers=["CPUExecutionProvider"])
    network = trainer.algorithm.export_module().eval()
    for shape in [(1, 5), (3, 200)]:
        ids = np.random.default_rng(0).integers(0, 1024, shape)
        with torch.no_grad():
            expected = network(torch.as_tensor(ids)).numpy()
        assert np.abs(session.run(None, {"input_ids": ids})[0] - expected).max() <= 1e-4


def test_a_finetuned_child_keeps_its_parents_tokenizer_and_starts_from_its_weights(pretrained: tuple,
                                                                                   topics: Path,
                                                                                   tmp_path: Path) -> None:
    """``Trainer.from_checkpoint(run, mode="finetune", new_data=...)`` on other text: a child run of the
    ``pretrained`` one that encodes with the parent's tokenizer (no new BPE is trained) and starts from its weights:
    after one epoch its perplexity is far below a fresh model's after the same epoch on the same text."""
    trainer, result = pretrained
    some = tmp_path / "some.jsonl"
    some.write_text("".join(topics.read_text().splitlines(keepends=True)[::8]))
    home = str(Path(result.run_dir).parents[3])  # the fixture's own store: a new child run, the parent untouched
    child = Trainer.from_checkpoint(result.run_uri, new_data=str(some), mode="finetune", home=home,
                                    hyperparams={"max_epochs": 1}, verbose=False)
    done = child.fit()
    record = RunStore(home).get(done.run_uri)
    assert done.parent == result.run_uri and record.mode == "finetune"
    assert child.algorithm.data_spec.extra["tokenizer"] == trainer.algorithm.data_spec.extra["tokenizer"]
    text = "The with statement"
    assert child.algorithm.tokenizer.encode(text) == trainer.algorithm.tokenizer.encode(text)
    same = {"max_epochs": 1, "max_seq_len": 128, "vocab_size": 1024, "batch_size": 8, "lr": 3e-3, "scheduler": "none"}
    fresh = Trainer("llm-tiny", hyperparams=same, home=str(tmp_path / "fresh"), verbose=False).fit(str(some))
    print("finetuned", done.metrics["val_perplexity"], "fresh", fresh.metrics["val_perplexity"])
    assert done.metrics["val_perplexity"] < fresh.metrics["val_perplexity"] / 2


def test_evaluate_on_the_held_out_documents_reproduces_the_validation_perplexity(pretrained: tuple, topics: Path,
                                                                                 tmp_path: Path) -> None:
    """``evaluate`` reads text with the run's tokenizer and window length: on the documents the run held out
    (written in the run's order) its per-token loss equals the best checkpoint's validation loss within 1e-6, and
    its perplexity is that loss's exponential; ``predict`` writes, per prompt line, the text the model continues
    it with (greedy, as ``generate`` writes it)."""
    import json

    from twinkle_llm.data import TextProcessor
    from twinkle_llm.reading import read_documents

    trainer, result = pretrained
    documents, _ = read_documents(str(topics))
    _, held = TextProcessor(max_seq_len=128, vocab_size=1024).split(len(documents), 0)
    data = tmp_path / "held-out.jsonl"
    data.write_text("".join(json.dumps({"text": documents[i].text}) + "\n" for i in held))
    evaluation = trainer.evaluate(str(data), output=str(tmp_path / "evaluation"))
    assert evaluation.metrics["loss"] == pytest.approx(result.best_metric, abs=1e-6)  # best val_loss
    assert evaluation.metrics["perplexity"] == pytest.approx(math.exp(evaluation.metrics["loss"]), rel=1e-6)
    assert evaluation.details["documents"] == len(held) and evaluation.samples == evaluation.details["windows"]
    assert (tmp_path / "evaluation" / "evaluation.json").exists()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("The ", "A class ", "Lists are ")))
    written = trainer.predict(str(prompts), str(tmp_path / "out.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert written.count == 3 and [r["id"] for r in rows] == [f"{prompts}:{n}" for n in (1, 2, 3)]
    assert rows[0]["text"] == trainer.algorithm.generate("The ", max_new_tokens=32)  # greedy, as generate writes
