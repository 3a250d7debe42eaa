"""A MeloTTS-style checkpoint initialises ``melotts`` (no training, no download): the test writes one as MeloTTS's
``utils.save_checkpoint`` does — ``checkpoint.pth`` holding ``{"model": state dict, "iteration", "optimizer",
"learning_rate"}`` in MeloTTS's names (legacy weight norm's ``weight_g``/``weight_v``, ``dec.cond``,
``enc_p.encoder.spk_emb_linear``, the flow's couplings at even indices between flips), beside a ``config.json`` —
from a HiFi-GAN voice. Loaded into a fresh voice, it speaks exactly as the source (max |Δ| ≤ 1e-5), every tensor
renamed; with MeloTTS's parts that Twinkle lacks (the stochastic duration predictor, a fifth upsampling) and without
a part Twinkle has, the report lists them as ignored and fresh."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from twinkle_core.data import DataSpec
from twinkle_core.pretrained import WeightsMismatchError


def _voice(weights: str | None = None) -> object:
    from twinkle_audio.melotts import MelOTTS

    torch.manual_seed(0 if weights is None else 1)  # a loaded voice starts from other random weights
    voice = MelOTTS(weights=weights, vocoder="hifigan")
    voice.configure_data(DataSpec("text_to_speech", (32,), vocab_size=40, class_names=("ann",), input_dtype="int64",
                                  extra={"sample_rate": 16000, "num_tones": 9, "num_languages": 3}))
    return voice


def _as_melotts(name: str) -> str:
    """Twinkle's name → MeloTTS's (the inverse of ``twinkle_audio.melotts.melotts_name``)."""
    name = re.sub(r"\.parametrizations\.weight\.original0$", ".weight_g", name)
    name = re.sub(r"\.parametrizations\.weight\.original1$", ".weight_v", name)
    name = re.sub(r"^dec\.cond_layer\.", "dec.cond.", name)
    name = re.sub(r"^enc_p\.speaker_proj\.", "enc_p.encoder.spk_emb_linear.", name)
    return re.sub(r"^flow\.flows\.(\d+)\.", lambda m: f"flow.flows.{2 * int(m.group(1))}.", name)


def _speak(voice: object) -> torch.Tensor:
    from twinkle_audio.melotts import SpeechGraph

    phones = torch.tensor([[3, 7, 12, 5, 9, 21]])
    inputs = (phones, torch.ones_like(phones), torch.ones_like(phones), torch.tensor([6]), torch.tensor([0]),
              torch.tensor([[0.0, 1.0]]))  # noise scale 0: deterministic
    with torch.no_grad():
        return SpeechGraph(voice.model.eval())(*inputs)[0]


def _write(folder: Path, state: dict[str, torch.Tensor]) -> Path:
    folder.mkdir()
    torch.save({"model": state, "iteration": 1200, "learning_rate": 2e-4,
                "optimizer": {"state": {}, "param_groups": [{"lr": 2e-4, "betas": (0.8, 0.99), "params": [0]}]}},
               folder / "checkpoint.pth")
    (folder / "config.json").write_text(json.dumps({"model": {"hidden_channels": 96}, "num_tones": 9,
                                                    "num_languages": 3, "symbols": ["_"] * 40}))
    return folder


def test_a_melotts_style_checkpoint_initialises_a_voice_and_the_report_names_what_differs(tmp_path: Path) -> None:
    source = _voice()
    state = {_as_melotts(k): v.clone() for k, v in source.model.state_dict().items()}
    assert any(k.endswith(".weight_g") for k in state) and any(k.startswith("flow.flows.2.") for k in state)
    whole = _voice(str(_write(tmp_path / "melo", state)))
    assert (_speak(whole) - _speak(source)).abs().max().item() <= 1e-5
    report = whole.weights_report
    assert report.format == "hf-folder" and len(report.renamed) > 100 and report.fresh == [] and report.ignored == []
    assert report.renamed["dec.cond_layer.weight"] == "dec.cond.weight"

    extra = {**state, "sdp.proj.weight": torch.zeros(96, 96, 1), "dec.ups.4.weight_v": torch.zeros(16, 8, 2)}
    wavenet = [k for k in extra if k.startswith("flow.flows.0.enc.wavenet.")]
    for key in wavenet:
        del extra[key]
    partly = _voice(str(_write(tmp_path / "melo-partly", extra)))
    assert sorted(partly.weights_report.ignored) == ["dec.ups.4.weight_v", "sdp.proj.weight"]
    twinkle_names = {k.replace(".weight_g", ".parametrizations.weight.original0")
                      .replace(".weight_v", ".parametrizations.weight.original1") for k in wavenet}
    assert set(partly.weights_report.fresh) == twinkle_names  # Twinkle's part the file lacks
    assert "a MeloTTS checkpoint" in partly.weights_report.notes[0]

    nothing = {"sdp.proj.weight": torch.zeros(3, 3, 1)}
    with pytest.raises(WeightsMismatchError, match="none of its 1 tensors has a counterpart"):
        _voice(str(_write(tmp_path / "melo-nothing", nothing)))
