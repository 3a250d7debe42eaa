"""Instruction tuning with LoRA from a local Hugging Face folder, as a new user's first run makes it: a few hundred
short chats of a checkable mapping (``samples.code_words``: made-up words onto made-up code words, asked in eight
phrasings) on a tiny random Qwen3 folder as transformers writes it (``eos_token_id`` null; the tokenizer's
``eos_token`` is ChatML's ``<|im_end|>``), with nothing set but the LoRA rank. The planner sizes the window from the
data (not 512 tokens for 30-token chats) and trains enough optimizer steps; generation — in the library,
`twinkle llm generate --chat` and the ``hf`` export's ``generation_config.json`` — stops at the end of the
assistant's turn. The base stays frozen and out of the checkpoints; the merged ``hf`` folder and the ``peft``
adapter reproduce the trained logits, and the exported folder's tokenizer renders the chat as training did; every
validation wrote held-out generations. (A LoRA run from a folder Twinkle itself exported — pre-training, then the
``hf`` export as the base — is test_preference.py's DPO.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from twinkle_core import RunStore, Trainer, load_torch_file
from twinkle_core.cli import main
from twinkle_llm.samples import code_words, write_chat_base, write_conversations

pytestmark = pytest.mark.slow


def _chatml(prompt: str, answer: str) -> str:
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"


def _exact_match(algorithm: object, prompts: list[tuple[str, str]]) -> float:
    said = [algorithm.generate([{"role": "user", "content": p}], max_new_tokens=12) for p, _ in prompts]
    return sum(text == answer for text, (_, answer) in zip(said, prompts)) / len(prompts)


def test_lora_with_default_hyperparameters_learns_a_small_chat_set_and_stops_at_the_end_of_turn(
        tmp_path: Path, twinkle_home: Path) -> None:
    """With only ``weights`` and ``lora_rank`` given, 240 chats (40 words × 6 phrasings) reach exact match ≥ 0.9 on
    the mapping they teach and ≥ 0.8 on the 80 prompts held out (a trained word in a phrasing never trained with
    it; measured 1.0 and 0.88) — the issue's run with the old defaults (512-token windows, 10 epochs: a handful of
    optimizer steps) answered none. The plan says why: a window of 32 from the longest chat, and as many epochs as
    give instruction tuning's 1,000 steps (at most 100: 600 steps here). Answers end at
    ``<|im_end|>`` (exact match means nothing follows the code word), in the library and through the CLI; the
    ``hf`` export's generation config lists it, so transformers' own ``generate`` stops there too."""
    train, held_out = code_words(words=40)
    base = write_chat_base(tmp_path / "qwen3-tiny", [_chatml(p, a) for p, a in train])
    assert json.loads((base / "config.json").read_text())["eos_token_id"] is None
    data = write_conversations(tmp_path / "codes.jsonl", train)

    trainer = Trainer("llm-tiny", task="instruction_tuning", hyperparams={"weights": str(base), "lora_rank": 16},
                      progress_bar=False, verbose=False)
    result = trainer.fit(str(data))
    decisions = {d.name: d for d in result.plan.decisions}
    assert decisions["max_seq_len"].value == 32 and "the longest of the 240 conversations is" in \
        decisions["max_seq_len"].reason
    assert result.plan.max_epochs == 100 and "needs at least 1000 steps, at most 100 epochs" in \
        decisions["max_epochs"].reason
    assert trainer.algorithm.optim.lr == 3e-3  # LoRA's default rate

    learnt, generalised = _exact_match(trainer.algorithm, train[:80]), _exact_match(trainer.algorithm, held_out)
    print(f"exact match: trained prompts {learnt:.2f}, held-out prompts {generalised:.2f}")
    assert learnt >= 0.9 and generalised >= 0.8

    prompt, answer = next((p, a) for p, a in held_out if trainer.algorithm.generate(
        [{"role": "user", "content": p}], max_new_tokens=12) == a)
    said = CliRunner().invoke(main, ["llm", "generate", result.run_uri, prompt, "--chat", "--max-new-tokens", "12"])
    assert said.exit_code == 0 and said.stdout == answer + "\n", said.output

    # every validation wrote held-out generations; by the last one the model gives the data's own answers
    written = sorted((Path(result.run_dir) / "generations").glob("step-*.jsonl"))
    assert len(written) == result.plan.max_epochs
    last = [json.loads(line) for line in written[-1].read_text().splitlines()]
    assert len(last) == 2 and all(r["generated"] == r["reference"] for r in last)

    # the base is frozen and named, not stored: checkpoints hold the adapters alone
    saved = load_file(base / "model.safetensors")
    frozen = trainer.algorithm.model.get_base_model().state_dict()["model.layers.1.mlp.down_proj.base_layer.weight"]
    assert torch.equal(frozen, saved["model.layers.1.mlp.down_proj.weight"])
    checkpoint = load_torch_file(result.best_checkpoint)
    assert checkpoint["state_dict"] and all(".lora_" in key for key in checkpoint["state_dict"])
    assert RunStore().get(result.run_uri).hyperparams["weights"] == str(base)  # the run names its base

    exported = trainer.export(format="hf")
    adapter = trainer.export(format="peft")
    assert exported.max_abs_diff <= 1e-4 and exported.details["merged_lora"] is True
    assert adapter.max_abs_diff <= 1e-4 and adapter.details["base"] == str(base)
    assert exported.metric_export == exported.metric_torch  # the same next-token accuracy on the held-out windows
    generation = json.loads((Path(exported.path) / "generation_config.json").read_text())
    end_of_turn = trainer.algorithm.tokenizer.backend.token_to_id("<|im_end|>")
    assert end_of_turn in (generation["eos_token_id"] if isinstance(generation["eos_token_id"], list)
                           else [generation["eos_token_id"]])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(exported.path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(exported.path, local_files_only=True, dtype=torch.float32)
    turns = [{"role": "user", "content": prompt}]
    rendered = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert rendered == trainer.algorithm.chat_template.render(turns, add_generation_prompt=True)
    chat = tokenizer.apply_chat_template(turns, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**chat, max_new_tokens=12, do_sample=False)[0, chat["input_ids"].shape[1]:]
    assert int(out[-1]) == end_of_turn and len(out) < 12  # stopped at the end of the turn, not at the limit
    assert tokenizer.decode(out, skip_special_tokens=True) == answer
    assert RunStore().get(result.run_uri).status == "finished"
