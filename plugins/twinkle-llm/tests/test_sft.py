"""Instruction tuning with LoRA from a local Hugging Face folder: the pre-trained llm-tiny exported as an ``hf``
folder is the base; LoRA adapters learn a generated task with a checkable answer (the opposite of a word, asked
in eight phrasings) to exact match >= 0.9 on prompts held out of training, from 0 before; the base stays frozen
and out of the checkpoints; the merged ``hf`` folder and the ``peft`` adapter reproduce the trained logits, and
the exported folder's tokenizer renders the chat as training did; every validation wrote held-out generations, and
`twinkle llm generate --chat` answers from the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from twinkle_core import RunStore, Trainer, load_torch_file
from twinkle_core.cli import main
from twinkle_llm.samples import write_conversations

pytestmark = pytest.mark.slow

def _exact_match(algorithm: object, prompts: list[tuple[str, str]]) -> float:
    hits = sum(algorithm.generate([{"role": "user", "content": prompt}], max_new_tokens=8).strip() == answer
               for prompt, answer in prompts)
    return hits / len(prompts)


def test_lora_sft_from_a_local_folder_learns_held_out_prompts_and_exports_with_parity(
        pretrained: tuple, base_folder: Any, opposites: tuple, twinkle_home: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    base_trainer, _ = pretrained
    base = base_folder
    assert base.max_abs_diff <= 1e-4 and base.details["merged_lora"] is False
    train, held_out = opposites
    data = write_conversations(tmp_path / "opposites.jsonl", train)
    before = _exact_match(base_trainer.algorithm, held_out)

    trainer = Trainer("llm-tiny", task="instruction_tuning",
                      # a validation split of 2 % (4 conversations): at 5 % it took phrasings that the held-out
                      # prompts' words are learnt from, and the result rested on the CPU's rounding (0.875 to 0.97)
                      hyperparams={"weights": base.path, "lora_rank": 16, "lr": 3e-3, "max_epochs": 50,
                                   "val_fraction": 0.02,
                                   "batch_size": 8, "max_seq_len": 128},
                      progress_bar=False, verbose=False)
    result = trainer.fit(str(data))
    after = _exact_match(trainer.algorithm, held_out)
    print("exact match before", before, "after", after, result.metrics)
    assert before <= 0.05 and after >= 0.9

    # every validation wrote held-out generations; by the last one the model gives the data's own answers
    written = sorted((Path(result.run_dir) / "generations").glob("step-*.jsonl"))
    assert len(written) == 50
    last = [json.loads(line) for line in written[-1].read_text().splitlines()]
    assert len(last) == 2 and all(r["generated"] == r["reference"] for r in last)
    # `twinkle llm generate --chat` answers a held-out prompt from the run's best checkpoint
    prompt, answer = held_out[1]
    said = CliRunner().invoke(main, ["llm", "generate", result.run_uri, prompt, "--chat", "--max-new-tokens", "8"])
    assert said.exit_code == 0, said.output
    assert said.stdout.strip() == answer

    # the base is frozen and named, not stored: checkpoints hold the adapters alone
    net = trainer.algorithm.model
    saved = load_file(Path(base.path) / "model.safetensors")
    frozen = net.get_base_model().state_dict()["model.layers.1.mlp.down_proj.base_layer.weight"]
    assert torch.equal(frozen, saved["model.layers.1.mlp.down_proj.weight"])
    checkpoint = load_torch_file(result.best_checkpoint)
    assert checkpoint["state_dict"] and all(".lora_" in key for key in checkpoint["state_dict"])
    assert RunStore().get(result.run_uri).hyperparams["weights"] == base.path  # the run names its base

    merged = trainer.export(format="hf")
    adapter = trainer.export(format="peft")
    assert merged.max_abs_diff <= 1e-4 and merged.details["merged_lora"] is True
    assert adapter.max_abs_diff <= 1e-4 and adapter.details["base"] == base.path
    assert merged.metric_export == merged.metric_torch  # the same next-token accuracy on the held-out windows
    chat = [{"role": "user", "content": held_out[0][0]}]
    tokenizer = AutoTokenizer.from_pretrained(merged.path, local_files_only=True)
    rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert rendered == trainer.algorithm.chat_template.render(chat, add_generation_prompt=True)
