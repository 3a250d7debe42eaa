"""Preference tuning (DPO) with LoRA: pairs become the prompt answered twice with labels on the answers only, bad
pairs are named errors with file and line, and DPO's loss starts at log 2 against the adapter-free base and its
gradient moves the rewards towards the chosen answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinkle_core.data import DataError, MissingColumnError, PrepareContext
from twinkle_llm.data import IGNORE, PreferenceProcessor
from twinkle_llm.tokenizing import TextTokenizer


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_each_pair_is_the_prompt_answered_twice_labelled_on_the_answers(tmp_path: Path) -> None:
    records = [{"prompt": f"What is {a} plus {b}?", "chosen": str(a + b), "rejected": str(a + b + 1)}
               for a in range(6) for b in range(4)]
    records.append({"prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "2 + 2?"}],
                    "chosen": [{"role": "assistant", "content": "4"}], "rejected": "five"})
    prepared = PreferenceProcessor(vocab_size=300).prepare(str(_write(tmp_path / "pairs.jsonl", records)),
                                                           PrepareContext(seed=0))
    tokenizer = TextTokenizer.from_json(prepared.spec.extra["tokenizer"])
    ids, labels = prepared.train.tensors
    assert ids.shape[1] == 2 and ids.shape == labels.shape and len(ids) + len(prepared.val) == 25
    for row in range(len(ids)):
        chosen, rejected = ([t for t, label in zip(ids[row, side].tolist(), labels[row, side].tolist())
                             if label != IGNORE] for side in (0, 1))
        answers = [tokenizer.backend.decode(side, skip_special_tokens=False) for side in (chosen, rejected)]
        assert all(a.endswith("<|endoftext|>") and "###" not in a for a in answers)  # the answer and its end
        prompt_part = ids[row, 0][labels[row, 0] == IGNORE][:5]
        assert prompt_part.tolist() == ids[row, 1][labels[row, 1] == IGNORE][:5].tolist()  # one prompt, twice
    assert next(d for d in prepared.decisions if d.name == "padding").value == ids.shape[2]


@pytest.mark.parametrize("record, error, message", [
    ({"prompt": "a", "chosen": "b"}, MissingColumnError, r"line 2: no field 'rejected' \(found: prompt, chosen\)"),
    ({"prompt": "a", "chosen": "b", "rejected": "b"}, DataError, r"line 2: 'chosen' and 'rejected' are the same"),
    ({"prompt": [{"role": "assistant", "content": "a"}], "chosen": "b", "rejected": "c"}, DataError,
     r"line 2: message 1 is 'assistant' first: roles out of order"),
    ({"prompt": "a", "chosen": [{"role": "user", "content": "b"}], "rejected": "c"}, DataError,
     r"line 2: 'chosen' as a list must hold one assistant message"),
    ({"prompt": "a", "chosen": "", "rejected": "c"}, DataError, r"line 2: 'chosen' is empty"),
])
def test_bad_pairs_name_the_file_and_line(tmp_path: Path, record: object, error: type, message: str) -> None:
    data = _write(tmp_path / "bad.jsonl", [{"prompt": "fine", "chosen": "yes", "rejected": "no"}, record])
    with pytest.raises(error, match=message):
        PreferenceProcessor().prepare(str(data))


@pytest.mark.parametrize("quantize_base", ["none", "nf4"])
def test_dpo_starts_at_log_2_against_the_adapter_free_base_and_its_gradient_prefers_the_chosen(
        small_base: Path, tmp_path: Path, quantize_base: str) -> None:
    """The mechanics, on a small Llama folder: with fresh adapters the policy is the reference (every margin 0,
    the loss log 2); the reference is the base with the adapters switched off, which training never changes; a few
    DPO steps on a batch raise the chosen answers' rewards above the rejected ones'. The same on the base stored in
    NF4 (QLoRA): policy and reference share the one quantized base."""
    import math

    import torch

    from twinkle_core.data import ModelInput
    from twinkle_llm.model import LlmTiny

    records = [{"prompt": f"Spell {n} backwards", "chosen": str(n)[::-1], "rejected": str(n)}
               for n in range(102, 130) if str(n) != str(n)[::-1]]
    prepared = PreferenceProcessor(max_seq_len=64).prepare(
        str(_write(tmp_path / "pairs.jsonl", records)),
        PrepareContext(seed=0, model_input=ModelInput(tokenizer=str(small_base))))
    torch.manual_seed(0)
    algorithm = LlmTiny(weights=str(small_base), lora_rank=8, beta=0.5, task="preference_tuning",
                        quantize_base=quantize_base)
    algorithm.configure_data(prepared.spec)
    batch = prepared.train.tensors
    first = algorithm.preference_terms(batch)
    assert torch.equal(first.margin, torch.zeros_like(first.margin))
    assert first.loss.mean().item() == pytest.approx(math.log(2), abs=1e-6)
    reference = algorithm.reference_logits(batch[0].flatten(0, 1)).clone()
    optimizer = torch.optim.AdamW([p for p in algorithm.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(15):
        optimizer.zero_grad()
        algorithm.batch_loss(batch).backward()
        optimizer.step()
    after = algorithm.preference_terms(batch)
    assert after.loss.mean().item() < math.log(2) - 0.1 and (after.margin > 0).float().mean() >= 0.9
    assert torch.equal(algorithm.reference_logits(batch[0].flatten(0, 1)), reference)  # the base never moved
    assert algorithm.quantized_base == quantize_base


@pytest.mark.slow
def test_dpo_with_lora_prefers_the_right_answer_on_held_out_prompts(base_folder: object, opposites: tuple,
                                                                   twinkle_home: Path, tmp_path: Path) -> None:
    """DPO from the pre-trained llm-tiny folder on pairs of the opposites task (the right opposite of a word chosen
    over a fixed wrong one), then judged on the 32 prompts held out of training: the preference accuracy (the
    chosen answer's implicit reward, beta × log π/π_ref, above the rejected one's — TRL's rewards/accuracies) is at
    least 0.9, and the model's own choice (the likelier answer) moves from chance towards the right one."""
    from twinkle_core import Trainer
    from twinkle_llm.samples import wrong_answers, write_preferences

    train, held_out = opposites
    wrong = wrong_answers()  # a fixed wrong answer per word: neither the word nor its opposite
    data = write_preferences(tmp_path / "prefs.jsonl", train, wrong)
    trainer = Trainer("llm-tiny", task="preference_tuning",
                      hyperparams={"weights": base_folder.path,  # type: ignore[attr-defined]
                                   "lora_rank": 16, "lr": 5e-3, "beta": 1.0,
                                   "max_epochs": 10, "batch_size": 16, "val_fraction": 0.05},
                      progress_bar=False, verbose=False)
    result = trainer.fit(str(data))
    model = trainer.algorithm

    def score(prompt: str, answer: str, reference: bool) -> float:
        return model.log_likelihood([{"role": "user", "content": prompt}], answer, reference=reference)

    def share(test: object) -> float:
        return sum(bool(test(p, a, wrong[a])) for p, a in held_out) / len(held_out)  # type: ignore[operator]

    before = share(lambda p, a, b: score(p, a, True) > score(p, b, True))  # the reference is the base
    after = share(lambda p, a, b: score(p, a, False) > score(p, b, False))
    rewards = share(lambda p, a, b: score(p, a, False) - score(p, a, True) > score(p, b, False) - score(p, b, True))
    print("held out: likelihood accuracy before", before, "after", after, "preference accuracy", rewards,
          result.metrics)
    assert rewards >= 0.9 and result.metrics["val_preference_accuracy"] >= 0.9
    assert before <= 0.6 and after >= before + 0.15
    assert result.metrics["val_reward_margin"] > 0
