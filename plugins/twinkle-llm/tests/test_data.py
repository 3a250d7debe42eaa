"""Raw text into packed windows: documents never attend to each other, the tokenizer is trained on the training
split only and kept with the run, and bad input is a named error with its file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from twinkle_core.data import DataError, EmptyDataError, MissingColumnError, PrepareContext, UnsupportedFormatError
from twinkle_llm.data import IGNORE, TextProcessor, pack


def test_packing_restarts_positions_per_document_and_never_labels_a_documents_first_token() -> None:
    packed = pack([[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]], eos_id=0, pad_id=1, length=6)
    assert packed.input_ids.tolist() == [[5, 6, 7, 0, 8, 9], [0, 10, 11, 12, 13, 14], [0, 1, 1, 1, 1, 1]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1], [0, 0, 1, 2, 3, 4], [0, 0, 1, 2, 3, 4]]
    assert packed.labels.tolist() == [[IGNORE, 6, 7, 0, IGNORE, 9], [0, IGNORE, 11, 12, 13, 14],
                                      [0, IGNORE, IGNORE, IGNORE, IGNORE, IGNORE]]
    assert packed.tokens == 13 and packed.efficiency == pytest.approx(13 / 18)


def test_a_packed_document_gets_the_logits_it_gets_alone() -> None:
    """The block-diagonal mask is real: the second document's logits do not depend on the first (transformers
    builds it from the position ids only without a KV cache, which is how ``CausalLM`` calls the model)."""
    from twinkle_llm.model import build_config
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("llama", {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 50})).eval()
    first, second = [3, 4, 5, 6, 7], [8, 9, 10, 11]
    packed = pack([first, second], eos_id=0, pad_id=1, length=11)
    with torch.no_grad():
        together = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
        alone = model(input_ids=torch.tensor([[*second, 0]]), use_cache=False).logits
    assert torch.allclose(together[0, 6:11], alone[0], atol=1e-5)
    with torch.no_grad():  # without the position ids the second document would see the first: they differ
        leaky = model(input_ids=packed.input_ids, use_cache=False).logits
    assert not torch.allclose(leaky[0, 6:11], alone[0], atol=1e-3)


def test_a_bpe_is_trained_on_the_training_documents_and_packs_them(topics: Path) -> None:
    prepared = TextProcessor(max_seq_len=128, vocab_size=512).prepare(str(topics), PrepareContext(seed=0))
    spec = prepared.spec
    assert spec.task == "causal_lm" and spec.input_shape == (128,) and spec.input_dtype == "int64"
    assert spec.vocab_size == 512 and spec.extra["tokenizer"].startswith("{")
    assert prepared.details["documents"] == 79 and prepared.details["split"].startswith("71 documents")
    assert prepared.details["packing_efficiency"] > 0.99
    ids, labels, positions = prepared.train[0]
    assert ids.shape == labels.shape == positions.shape == (128,)
    packing = next(d for d in prepared.decisions if d.name == "packing")
    assert "documents never attend to each other" in packing.reason
    # the same seed gives the same split and tokenizer; the stored tokenizer encodes the same ids again
    again = TextProcessor(max_seq_len=128, vocab_size=512).prepare(
        str(topics), PrepareContext(seed=0, model_input=_tokenizer(spec.extra["tokenizer"])))
    assert torch.equal(again.train.tensors[0], prepared.train.tensors[0])


def _tokenizer(text: str):  # noqa: ANN202
    from twinkle_core.data import ModelInput

    return ModelInput(tokenizer=text)


@pytest.mark.parametrize("content, error, message", [
    ('{"text": "fine"}\n{"text": "also fine"\n', DataError, r"bad\.jsonl, line 2: not valid JSON"),
    ('{"text": "fine"}\n{"body": "x"}\n', MissingColumnError, r"bad\.jsonl, line 2: no field 'text' \(found: body\)"),
    ('{"text": "fine"}\n{"text": "  "}\n', DataError, r"bad\.jsonl, line 2: 'text' is empty"),
    ('{"text": 3}\n', DataError, r"bad\.jsonl, line 1: 'text' is int, not text"),
])
def test_bad_jsonl_names_the_file_and_line(tmp_path: Path, content: str, error: type, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(error, match=message):
        TextProcessor().prepare(str(path))


def test_non_utf8_empty_and_foreign_files_are_named(tmp_path: Path) -> None:
    latin = tmp_path / "latin.txt"
    latin.write_bytes("first line\nd\xe9j\xe0 vu\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.txt, line 2: bytes that are not UTF-8"):
        TextProcessor().prepare(str(latin))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match=r"empty\.txt: the file is empty"):
        TextProcessor().prepare(str(empty))
    with pytest.raises(UnsupportedFormatError, match=r"cannot read .*notes\.csv' as text"):
        (tmp_path / "notes.csv").write_text("a,b\n")
        TextProcessor().prepare(str(tmp_path / "notes.csv"))
    short = tmp_path / "short.txt"
    short.write_text("only a few words")
    with pytest.raises(EmptyDataError, match=r"too short to hold out a window of \d+"):
        TextProcessor().prepare(str(short))


def test_a_parquet_file_and_a_folder_of_texts_are_read(tmp_path: Path, topics: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [json.loads(line)["text"] for line in topics.read_text().splitlines()][:20]
    pq.write_table(pa.table({"body": texts}), tmp_path / "docs.parquet")
    prepared = TextProcessor(max_seq_len=64, vocab_size=300, text_field="body").prepare(str(tmp_path / "docs.parquet"))
    assert prepared.details["documents"] == 20
    with pytest.raises(MissingColumnError, match=r"docs\.parquet, line 1: no field 'text' \(found: body\)"):
        TextProcessor().prepare(str(tmp_path / "docs.parquet"))
    folder = tmp_path / "folder"
    folder.mkdir()
    for number, text in enumerate(texts[:5]):
        (folder / f"{number}.txt").write_text(text)
    assert TextProcessor(max_seq_len=64, vocab_size=300).prepare(str(folder)).details["documents"] == 5
