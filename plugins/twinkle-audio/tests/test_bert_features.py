"""MeloTTS's optional BERT features: a BERT saved in a local folder (built here from a config: nothing
downloads) gives each phone its word's hidden state; a voice trains, speaks and exports with them; anything but
a local folder is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from twinkle_core import Trainer
from twinkle_core.errors import TwinkleError

pytestmark = pytest.mark.slow


def _tiny_bert(folder: Path, words: set[str]) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    return folder


def test_a_voice_trains_speaks_and_exports_with_bert_features(tmp_path, monkeypatch) -> None:
    from twinkle_audio.bert import BertFeatures
    from twinkle_audio.samples import EN_SENTENCES, write_espeak_corpus
    from twinkle_audio.text import phonemize

    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    corpus = write_espeak_corpus(tmp_path / "en", "en", count=12, rate=16000)
    words = {w.lower() for s in EN_SENTENCES for w in phonemize(s, "en").words}
    bert = _tiny_bert(tmp_path / "bert", words - {"lazy"})  # one word the tokenizer does not know

    features = BertFeatures(str(bert))
    phonemes = phonemize("The quick brown fox, lazy.", "en")
    got = features.phone_features([phonemes], len(phonemes) + 2)
    assert got.shape == (1, len(phonemes) + 2, 32)
    for column, word in enumerate(phonemes.word_of):  # every phone of a word has the word's feature
        assert (got[0, column].abs().sum() > 0) == (word >= 0)
        if column and word >= 0 and phonemes.word_of[column - 1] == word:
            assert torch.equal(got[0, column], got[0, column - 1])
    assert got[0, len(phonemes):].abs().max() == 0  # padding

    result = Trainer("melotts", hyperparams={"max_epochs": 2, "batch_size": 4, "lang": "en", "sample_rate": 16000,
                                             "bert": str(bert), "progress_bar": False}, verbose=False).fit(str(corpus))
    assert result.status == "finished"
    trainer = Trainer.from_checkpoint(result.run_uri, mode="finetune", verbose=False)
    voice, *_ = trainer.model_for_export()
    assert voice.model.enc_p.bert_proj.in_features == 32
    assert not any("bert" in key and "proj" not in key for key in voice.state_dict())  # BERT stays in its folder
    assert len(voice.speak("The quick brown fox.")) > 0
    exported = trainer.export(format="onnx")
    assert exported.details["input"][-1] == "bert" and exported.max_abs_diff < 1e-3


def test_bert_features_load_only_from_a_local_folder(tmp_path) -> None:
    from twinkle_audio.bert import BertFeatures

    with pytest.raises(TwinkleError, match="is not a local folder"):
        BertFeatures("bert-base-uncased")  # a hub name: never downloaded
    (tmp_path / "empty").mkdir()
    with pytest.raises(TwinkleError, match="holds no loadable model and tokenizer"):
        BertFeatures(str(tmp_path / "empty"))
