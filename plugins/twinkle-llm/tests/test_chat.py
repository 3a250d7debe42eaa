"""Conversations for instruction tuning: only the assistant's tokens are labels, conversations are packed whole,
a model folder's own Jinja chat template is used (sandboxed), and bad records are named errors with file and
line — out-of-order roles, missing fields, conversations longer than max_seq_len (refused, or cut and counted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinkle_core.data import DataError, MissingColumnError, ModelInput, PrepareContext
from twinkle_llm.chat import ChatTemplate, ChatTemplateError
from twinkle_llm.data import IGNORE, ChatProcessor, pack_whole
from twinkle_llm.tokenizing import TextTokenizer

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _chat(user: str, answer: str) -> dict[str, object]:
    return {"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": user},
                         {"role": "assistant", "content": answer}]}


def _labelled(prepared: object, tokenizer: TextTokenizer) -> list[str]:
    """The text of each run of labelled tokens in the training windows."""
    ids, labels = prepared.train.tensors[0], prepared.train.tensors[1]  # type: ignore[attr-defined]
    runs, current = [], []
    for token, label in zip(ids.flatten().tolist(), labels.flatten().tolist()):
        if label != IGNORE:
            assert label == token  # a label is the token at its own position (the model shifts)
            current.append(token)
        elif current:
            runs.append(tokenizer.backend.decode(current, skip_special_tokens=False))
            current = []
    return runs


def test_only_the_assistants_answer_and_its_end_token_are_labels(tmp_path: Path) -> None:
    records = [_chat(f"What is {a} plus {b}?", f"{a + b}") for a in range(9) for b in range(5)]
    records += [{"prompt": "Say hello.", "response": "hello there", "system": "Be kind."}]
    data = _write(tmp_path / "chats.jsonl", records)
    prepared = ChatProcessor(max_seq_len=96, vocab_size=300).prepare(str(data), PrepareContext(seed=0))
    tokenizer = TextTokenizer.from_json(prepared.spec.extra["tokenizer"])
    runs = _labelled(prepared, tokenizer)
    answers = {f"{a + b}<|endoftext|>" for a in range(9) for b in range(5)} | {"hello there<|endoftext|>"}
    assert runs and set(runs) <= answers  # nothing of the system or user turns, nor the headers, is a label
    assert len(runs) == prepared.details["conversations"] - 5  # 5 of 46 held out
    assert prepared.spec.extra["chat_template"] == "twinkle" and prepared.details["truncated"] == 0
    positions = prepared.train.tensors[2]
    assert (positions[:, 0] == 0).all() and int((positions == 0).sum()) >= len(runs)  # restarts per conversation


def test_conversations_are_packed_whole() -> None:
    packed = pack_whole([([5, 6, 7], [IGNORE, 6, 7]), ([8, 9], [IGNORE, 9]), ([10, 11, 12, 13], [IGNORE, 11, 12, 13])],
                        pad_id=1, length=6)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 1], [10, 11, 12, 13, 1, 1]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    assert packed.labels.tolist() == [[IGNORE, 6, 7, IGNORE, 9, IGNORE], [IGNORE, 11, 12, 13, IGNORE, IGNORE]]
    assert packed.tokens == 9


def test_a_model_folders_jinja_template_is_used_and_its_turns_found(tmp_path: Path) -> None:
    folder = tmp_path / "chat-model"
    folder.mkdir()
    texts = ["<|im_start|>user\nhi<|im_end|>\n"] * 3 + ["plain words for the merges, plus numbers 1 2 3"] * 5
    tokenizer = TextTokenizer.train(texts, 300)
    tokenizer.backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer.backend.save(str(folder / "tokenizer.json"))
    end_of_turn = tokenizer.backend.token_to_id("<|im_end|>")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "eos_token_id": [0, end_of_turn]}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|endoftext|>"}))
    data = _write(tmp_path / "chats.jsonl", [_chat(f"Count to {n}", " ".join(map(str, range(1, n + 1))))
                                             for n in range(1, 9)])
    prepared = ChatProcessor(max_seq_len=128).prepare(
        str(data), PrepareContext(seed=0, model_input=ModelInput(tokenizer=str(folder))))
    assert prepared.spec.extra["chat_template"] == str(folder)
    loaded = TextTokenizer.from_folder(str(folder))
    assert loaded.stop_ids == (0, end_of_turn)  # the end of a turn stops generation too
    runs = _labelled(prepared, loaded)
    assert runs and all(run.endswith("<|im_end|>\n") and "<|im_start|>" not in run for run in runs)
    template = ChatTemplate.for_folder(str(folder), loaded.eos_text)
    assert template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    sneaky = ChatTemplate("sneaky", "", "{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError, match="reaches for what the sandbox refuses .*__class__"):
        sneaky.render([{"role": "user", "content": "hi"}])  # the sandbox: nothing in a template reaches Python
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ cycler.__init__.__globals__ }}"}))
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config\.json' field 'chat_template' reaches for what the "
                                                "sandbox refuses"):  # named by its file and field
        ChatTemplate.for_folder(str(folder), "").render([{"role": "user", "content": "hi"}])
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in messages %}"}))
    with pytest.raises(ChatTemplateError, match=r"field 'chat_template' is not a valid Jinja template \(line 1"):
        ChatTemplate.for_folder(str(folder), "").render([{"role": "user", "content": "hi"}])
    reordering = ChatTemplate("reordering", "", "{% for m in messages | reverse %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(ChatTemplateError, match="does not render the conversation turn by turn"):
        reordering.with_spans(_chat("a", "b")["messages"], "x.jsonl, line 1")  # type: ignore[arg-type]


@pytest.mark.parametrize("record, error, message", [
    ({"messages": [{"role": "assistant", "content": "hi"}]}, DataError,
     r"line 2: message 1 is 'assistant' first: roles out of order"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, DataError,
     r"line 2: message 2 is 'user' after 'user': roles out of order"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}, DataError,
     r"line 2: message 2 has role 'robot'; use one of system, user, assistant"),
    ({"messages": [{"role": "user", "content": "a"}]}, DataError,
     r"line 2: the last message is 'user': a conversation to train on ends with the assistant's answer"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": " "}]}, DataError,
     r"line 2: message 2's content is empty"),
    ({"prompt": "a"}, MissingColumnError, r"line 2: no field 'response' \(found: prompt\)"),
    ({"question": "a"}, MissingColumnError, r"line 2: no field 'messages', nor 'prompt' and 'response'"),
])
def test_bad_conversations_name_the_file_and_line(tmp_path: Path, record: object, error: type,
                                                  message: str) -> None:
    data = _write(tmp_path / "bad.jsonl", [_chat("fine", "yes"), record])
    with pytest.raises(error, match=message):
        ChatProcessor().prepare(str(data))


def test_a_conversation_longer_than_max_seq_len_is_refused_or_cut_and_counted(tmp_path: Path) -> None:
    records = [_chat("short", "yes")] * 4 + [_chat("long " * 200, "no")] + [_chat("short", "no")] * 4
    data = _write(tmp_path / "long.jsonl", records)
    with pytest.raises(DataError, match=r"long\.jsonl, line 5: the conversation is \d+ tokens, longer than "
                                        r"max_seq_len = 64; .*truncate=True"):
        ChatProcessor(max_seq_len=64, vocab_size=300).prepare(str(data))
    prepared = ChatProcessor(max_seq_len=64, vocab_size=300, truncate=True).prepare(str(data))
    assert prepared.details["truncated"] == 1
    assert next(d for d in prepared.decisions if d.name == "truncate").reason.endswith("(first: "
                                                                                      f"{data}, line 5)")


def test_a_datasets_folder_gives_the_same_training_data_as_the_jsonl_it_was_made_from(tmp_path: Path) -> None:
    """A chat set written by ``datasets`` itself — save_to_disk of a DatasetDict (train and test splits) — and in
    the Hub's layout (Parquet shards under data/ with the README card's configs) is read as its train split: the
    same tokenizer, training and validation windows as the JSONL of those conversations (so training on it gives
    the same metrics); the run's data fingerprint covers the folder's shards; an evaluation reads its test split."""
    import torch
    from datasets import Dataset, DatasetDict

    from twinkle_core.data import is_hf_dataset, open_hf_dataset

    records = [_chat(f"What is {a} plus {b}?", f"{a + b}") for a in range(8) for b in range(5)]
    held = [_chat(f"What is {a} minus {b}?", f"{a - b}") for a in range(5, 8) for b in range(3)]
    jsonl = _write(tmp_path / "chats.jsonl", records)
    DatasetDict({"train": Dataset.from_list(records), "test": Dataset.from_list(held)}).save_to_disk(
        str(tmp_path / "saved"))
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    Dataset.from_list(records).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    Dataset.from_list(held).to_parquet(str(hub / "data" / "test-00000-of-00001.parquet"))
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                   "    path: data/train-*\n  - split: test\n    path: data/test-*\n---\n# chats\n")
    processor = ChatProcessor(max_seq_len=96, vocab_size=300)
    want = processor.prepare(str(jsonl), PrepareContext(seed=0))
    for folder in (tmp_path / "saved", hub):
        assert is_hf_dataset(str(folder)) and open_hf_dataset(str(folder)).evaluation_split() == "test"
        got = processor.prepare(str(folder), PrepareContext(seed=0))
        assert got.spec.extra["tokenizer"] == want.spec.extra["tokenizer"]
        for a, b in zip([*got.train.tensors, *got.val.tensors], [*want.train.tensors, *want.val.tensors]):
            assert torch.equal(a, b)
        assert got.details["conversations"] == len(records)
        shards = [name for name in got.manifest.files if name.endswith((".arrow", ".parquet"))]
        assert len(shards) == 2  # both splits' shards are in the fingerprint
