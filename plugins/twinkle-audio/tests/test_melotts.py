"""MelOTTS through Twinkle's engine on generated speech: the held-out log-mel error falls, the voice speaks
(Griffin-Lim), it reloads from its run, and a Mandarin corpus trains the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from twinkle_core import RunStore, Trainer

pytestmark = pytest.mark.slow


EPOCHS = 15
"""How long the English voice trains (about 150 s on one thread): its MCD-DTW first beats both baselines by the
margins asserted below at epoch 12 (0.58 and 2.1 dB); 15 leaves room (0.84 and 2.4 dB)."""


@pytest.fixture(scope="module")
def english(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """MelOTTS trained on 40 generated English clips for ``EPOCHS`` epochs, shared by this module's tests."""
    from twinkle_audio.samples import write_espeak_corpus

    mp = pytest.MonkeyPatch()
    mp.setenv("TWINKLE_HOME", str(tmp_path_factory.mktemp("home")))
    mp.setenv("TWINKLE_USER", "tester")
    corpus = write_espeak_corpus(tmp_path_factory.mktemp("voice") / "en", "en", count=40, rate=16000)
    result = Trainer("melotts", hyperparams={"max_epochs": EPOCHS, "batch_size": 8, "lang": "en", "sample_rate": 16000,
                                             "progress_bar": False}, verbose=False).fit(str(corpus))
    yield result
    mp.undo()


def test_the_held_out_spectrogram_error_falls(english) -> None:
    assert english.status == "finished" and english.monitor == "val_mel_l1"
    metrics = pd.read_csv(Path(english.run_dir) / "logs" / "metrics.csv")
    held_out = metrics["val_mel_l1"].dropna().tolist()
    assert len(held_out) == EPOCHS and held_out[-1] < 0.6 * held_out[0]
    assert {"train_kl", "train_duration", "train_magnitude_l1"} <= set(metrics.columns)
    # MCD-DTW of four held-out sentences spoken with predicted durations, averaged over the last five validations
    last = metrics.dropna(subset=["val_mcd"]).iloc[-5:][["val_mcd", "val_mcd_white_noise", "val_mcd_mean_spectrum"]]
    mcd, white, mean_spectrum = last.mean()
    print(f"MCD-DTW {mcd:.2f} dB; white noise {white:.2f}, mean spectrum {mean_spectrum:.2f}")
    assert mcd < mean_spectrum - 0.5 and mcd < white - 2.0  # beats both baselines (figures: the closing note)


def test_every_validation_saves_spoken_held_out_sentences(english) -> None:
    import soundfile

    folders = sorted((Path(english.run_dir) / "samples").glob("epoch-*"))
    assert len(folders) == EPOCHS and folders[-1].name == f"epoch-{EPOCHS - 1:03d}"
    wavs, pngs = sorted(folders[-1].glob("*.wav")), sorted(folders[-1].glob("*.png"))
    assert len(wavs) == len(pngs) >= 1 and pngs[0].stat().st_size > 5000
    samples, rate = soundfile.read(wavs[0])
    assert rate == 16000 and len(samples) > 1000


def test_trainer_synthesize_and_twinkle_tts_say_write_wavs(english, tmp_path) -> None:
    import soundfile

    from twinkle_core.testing import run_script

    trainer = Trainer.from_checkpoint(english.run_uri, mode="finetune", verbose=False)
    written = trainer.synthesize("Seven green apples.", lang="en")
    assert written.endswith("samples/Seven-green-apples.wav") and Path(written).exists()
    samples, rate = soundfile.read(written)
    assert rate == 16000 and len(samples) > 1000
    out = tmp_path / "say.wav"
    said = run_script(["-m", "twinkle_core", "tts", "say", english.run_uri, "Good night.", "-o", str(out)],
                      timeout=300)  # a process of its own, forked warm (Lightning imported once)
    assert said.returncode == 0, said.stderr[-2000:]
    assert out.exists() and soundfile.info(str(out)).samplerate == 16000


def test_evaluate_rescores_the_held_out_clips_and_predict_speaks_each_line(english, tmp_path) -> None:
    """``evaluate`` on a corpus of exactly the run's held-out clips reproduces the best epoch's ``val_mcd`` and
    its two baselines (rel. 1e-6: the logger keeps float32), with every clip's scores and a chart; ``predict`` on a
    text file of their sentences writes one WAV per line, in order, holding what ``synthesize`` says — so each
    WAV's MCD-DTW against its recording is ``evaluate``'s figure for that clip; a line the front end cannot read
    is named, or skipped and counted with ``bad_clips="skip"``."""
    import soundfile

    from twinkle_audio.audio import BadClipError
    from twinkle_audio.quality import mcd_dtw
    from twinkle_audio.speech_data import SpeechDataProcessor

    metrics = pd.read_csv(Path(english.run_dir) / "logs" / "metrics.csv").dropna(subset=["val_mel_l1"])
    best = metrics.loc[metrics["val_mel_l1"].idxmin()]
    corpus = Path(RunStore().get(english.run_uri).data_uri)
    held_out = {wav.stem for wav in (Path(english.run_dir) / "samples" / f"epoch-{int(best['epoch']):03d}").glob("*.wav")}
    lines = [line for line in (corpus / "metadata.csv").read_text().splitlines() if line.split("|")[0] in held_out]
    assert len(lines) == len(held_out) == 4  # every held-out clip (val_fraction 0.1 of 40) is one validation speaks
    test = tmp_path / "held-out"
    (test / "wavs").mkdir(parents=True)
    for line in lines:
        name = line.split("|")[0] + ".wav"
        (test / "wavs" / name).write_bytes((corpus / "wavs" / name).read_bytes())
    (test / "metadata.csv").write_text("\n".join(lines) + "\n")

    trainer = Trainer.from_checkpoint(english.run_uri, mode="finetune", verbose=False)
    evaluation = trainer.evaluate(str(test), output=str(tmp_path / "evaluation"))
    for name in ("mcd", "mcd_white_noise", "mcd_mean_spectrum"):
        assert evaluation.metrics[name] == pytest.approx(best[f"val_{name}"], rel=1e-6)
    assert evaluation.samples == 4 and evaluation.details["unseen_speakers"] == {}
    assert (tmp_path / "evaluation" / "mcd.png").read_bytes()[:4] == b"\x89PNG"
    clips = {row["text"]: row for row in evaluation.tables["per_clip"]}

    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(line.split("|")[-1] for line in lines) + "\n\n")
    spoken = trainer.predict(str(sentences), str(tmp_path / "speech.csv"))
    table = pd.read_csv(spoken.output)
    assert spoken.count == 4 and table["id"].tolist() == ["line-1", "line-2", "line-3", "line-4"]
    said, _ = soundfile.read(trainer.synthesize(table["text"][0], output=str(tmp_path / "said.wav")))
    first, _ = soundfile.read(tmp_path / table["audio"][0])
    assert np.array_equal(first, said)  # the same voice, the same seed, the same 16-bit samples
    spec = trainer.model_for_export()[0].data_spec
    recordings = {item["text"]: item["audio"].numpy()
                  for item in SpeechDataProcessor().read_samples(str(test), spec).dataset}
    for text, audio in zip(table["text"], table["audio"]):
        samples, rate = soundfile.read(tmp_path / audio, dtype="float32")
        assert rate == 16000 and audio.startswith("speech_files/")
        # scored against its recording, each WAV gives evaluate's figure for that clip (16-bit rounding aside)
        assert mcd_dtw(recordings[text], samples, rate) == pytest.approx(clips[text]["mcd"], abs=0.05)

    (tmp_path / "bad.txt").write_text("Hello there.\n\u2603\u2603\u2603\n")
    with pytest.raises(BadClipError, match=r"bad.txt:2"):
        trainer.predict(str(tmp_path / "bad.txt"), str(tmp_path / "bad.csv"))
    skipping = Trainer.from_checkpoint(english.run_uri, mode="finetune", hyperparams={"bad_clips": "skip"},
                                       verbose=False).predict(str(tmp_path / "bad.txt"), str(tmp_path / "bad.csv"))
    assert skipping.count == 1 and skipping.details["skipped"] == 1


def test_the_voice_speaks_and_reloads_from_its_run(english) -> None:
    voice, *_ = Trainer.from_checkpoint(english.run_uri, mode="finetune", verbose=False).model_for_export()
    audio = voice.speak("The train leaves at nine.")
    audio_seconds = len(audio) / 16000  # the speech's length, not a time measured
    assert audio.dtype == np.float32 and np.isfinite(audio).all() and 0.3 < audio_seconds < 10
    assert float(np.abs(audio).max()) > 0.001  # not silence
    with pytest.raises(Exception, match="unknown speaker 'nobody'"):
        voice.speak("Hello.", speaker="nobody")


def test_a_voice_plans_and_continues_like_every_algorithm(english) -> None:
    more = Trainer.from_checkpoint(english.run_uri, mode="continue", hyperparams={"max_epochs": 1}, verbose=False)
    again = more.fit()
    assert again.status == "finished" and again.parent == english.run_uri
    record = RunStore().get(again.run_uri)
    assert record.algorithm == "melotts" and record.mode == "continue" and np.isfinite(again.metrics["val_mel_l1"])
    assert english.plan.micro_batch_size == 8 and english.plan.estimates["flops_per_sample"] > 0


def test_the_onnx_export_matches_pytorch_at_any_sentence_length(english) -> None:
    import onnxruntime as ort
    import torch

    from twinkle_audio.text import phonemize

    trainer = Trainer.from_checkpoint(english.run_uri, mode="finetune", verbose=False)
    result = trainer.export(format="onnx")  # verified on the held-out sentences (noise scale 0) before it is kept
    assert result.max_abs_diff < 1e-3 and result.cosine > 0.9999 and result.samples == 4
    assert result.details["input"] == ["phones", "tones", "languages", "lengths", "speakers", "scales"]
    voice, *_ = trainer.model_for_export()
    graph = voice.export_module().eval()
    session = ort.InferenceSession(result.path, providers=["CPUExecutionProvider"])
    texts = ["Go.", "Seven green apples fell from the tree.",
             "She reads a book by the window every night, and the weather was warm and bright today."]
    encoded = [phonemize(text, "en") for text in texts]
    width = max(len(p) for p in encoded)
    pad = lambda values: values + [0] * (width - len(values))  # noqa: E731
    inputs = {"phones": torch.tensor([pad(p.phone_ids) for p in encoded]),
              "tones": torch.tensor([pad(p.tones) for p in encoded]),
              "languages": torch.tensor([pad(p.language_ids) for p in encoded]),
              "lengths": torch.tensor([len(p) for p in encoded]), "speakers": torch.zeros(3, dtype=torch.long),
              "scales": torch.tensor([[0.0, 1.0]] * 3)}
    for rows in (slice(0, 1), slice(2, 3), slice(0, 3)):  # one short, one long sentence and the padded batch
        batch = {name: value[rows] for name, value in inputs.items()}
        with torch.no_grad():
            expected, frames = graph(*batch.values())
        got, got_frames = session.run(None, {name: value.numpy() for name, value in batch.items()})
        assert got.shape == tuple(expected.shape) and (got_frames == frames.numpy()).all()
        assert np.abs(got - expected.numpy()).max() < 1e-3
    assert frames[2] > frames[1] > frames[0]  # longer sentences, more frames


def test_a_new_voice_fine_tunes_from_a_run_and_reports_its_fresh_speaker_table(english, tmp_path) -> None:
    import shutil

    import torch

    from twinkle_audio import MelOTTS

    folder = tmp_path / "two-voices"
    shutil.copytree(Path(RunStore().get(english.run_uri).data_uri), folder)
    rows = [line.split("|") for line in (folder / "metadata.csv").read_text().splitlines()][:16]
    (folder / "metadata.csv").unlink()
    (folder / "voices.list").write_text("".join(f"wavs/{key}.wav|{'ann' if i % 2 else 'bob'}|EN|{text}\n"
                                                for i, (key, text) in enumerate(rows)))
    with pytest.warns(UserWarning, match=r"1 tensors had no match and start fresh: emb_g.weight"):
        result = Trainer(algorithm=MelOTTS, voice_samples=str(folder), lang="en", steps=2, sample_rate=16000,
                         batch_size=4, weights=english.run_uri, progress_bar=False, verbose=False).fit()
    assert result.status == "finished"
    voice, *_ = Trainer.from_checkpoint(result.run_uri, mode="finetune", verbose=False).model_for_export()
    source, *_ = Trainer.from_checkpoint(english.run_uri, mode="finetune", verbose=False).model_for_export()
    assert voice.model.emb_g.weight.shape[0] == 2 and source.model.emb_g.weight.shape[0] == 1
    assert voice.weights_report.fresh == ["emb_g.weight"]
    # two optimizer steps move the started-from weights only a little: they were loaded, not re-drawn
    moved = (voice.model.enc_p.emb.weight - source.model.enc_p.emb.weight).detach().abs().max()
    assert float(moved) < 0.05 and len(voice.speak("Good night.", speaker="ann")) > 0
    bad = tmp_path / "bad.pt"
    torch.save({"something.else": torch.zeros(3)}, bad)
    with pytest.raises(Exception, match="match only 0 of this network"):
        Trainer(algorithm=MelOTTS, voice_samples=str(folder), lang="en", steps=1, sample_rate=16000,
                batch_size=4, weights=str(bad), progress_bar=False, verbose=False).fit()


def test_the_hifigan_voice_trains_as_a_gan_speaks_waveforms_and_exports(hifigan_reference, tmp_path,
                                                                        monkeypatch) -> None:
    """The session's HiFi-GAN reference run (2 epochs of 3 GAN steps): every loss part logged, three optimizers
    each stepped once per batch, a waveform spoken, an ONNX export that matches; accumulation is refused."""
    import torch

    from twinkle_core.errors import TwinkleError
    from twinkle_core.testing import copy_of

    home = copy_of(Path(hifigan_reference["home"]), tmp_path / "home")  # the export writes into the run
    monkeypatch.setenv("TWINKLE_HOME", str(home))
    result = RunStore().get(hifigan_reference["run_uri"])
    assert result.status == "finished"
    metrics = pd.read_csv(Path(RunStore().run_dir(result.id)) / "logs" / "metrics.csv")
    for name in ("train_discriminator", "train_adversarial", "train_feature_matching", "train_duration_discriminator",
                 "train_duration_adversarial", "train_mel_l1", "val_mel_l1"):
        assert np.isfinite(metrics[name].dropna()).all() and len(metrics[name].dropna()) == 2, name
    checkpoint = torch.load(RunStore().last_checkpoint(result.id), weights_only=True)
    assert len(checkpoint["optimizer_states"]) == 3 and checkpoint["global_step"] == 6  # a step is a batch
    generator_state, discriminator_state, duration_state = checkpoint["optimizer_states"]
    for state in (discriminator_state, duration_state):  # both discriminators learned too
        assert state["state"] and all(int(s["step"]) == 6 for s in state["state"].values())
    assert all(int(s["step"]) == 6 for s in generator_state["state"].values())
    trainer = Trainer.from_checkpoint(result.uri, mode="finetune", verbose=False)
    voice, *_ = trainer.model_for_export()
    audio = voice.speak("Seven green apples.")
    assert audio.dtype == np.float32 and len(audio) % 128 == 0 and 0 < float(np.abs(audio).max()) <= 1
    exported = trainer.export(format="onnx")  # the graph ends in the generator's waveform
    assert exported.max_abs_diff < 1e-3 and exported.cosine > 0.9999
    options = {"lang": "en", "sample_rate": 16000, "vocoder": "hifigan", "progress_bar": False}
    with pytest.raises(TwinkleError, match="steps its optimizers itself, so it cannot accumulate 4 micro-batches"):
        Trainer("melotts", hyperparams={**options, "max_steps": 2, "batch_size": 2, "effective_batch_size": 8},
                project="accumulating", verbose=False).fit(hifigan_reference["corpus"])
    assert [run.status for run in RunStore().list(project="accumulating")] == ["failed"]  # never left running


@pytest.fixture
def loopback_s3(monkeypatch):  # noqa: ANN201
    """An S3-protocol server (moto) on 127.0.0.1 and an s3fs filesystem on it."""
    import socket

    import s3fs
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
                       "FSSPEC_S3_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3fs.S3FileSystem(endpoint_url=endpoint)
    s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


def test_the_articles_call_trains_a_mandarin_voice_from_s3(tmp_path, monkeypatch, loopback_s3) -> None:
    from twinkle_audio import MelOTTS
    from twinkle_audio.samples import write_espeak_corpus

    monkeypatch.setenv("TWINKLE_HOME", str(tmp_path / "home"))
    corpus = write_espeak_corpus(tmp_path / "zh", "zh-cn", count=12, rate=16000)
    loopback_s3.mkdir("voice-dataset")
    loopback_s3.put(str(corpus), "voice-dataset/zh-cn", recursive=True)
    trainer = Trainer(algorithm=MelOTTS, voice_samples="s3://voice-dataset/zh-cn/", lang="zh-cn", steps=9,
                      sample_rate=16000, batch_size=4, progress_bar=False, verbose=False)  # the article's call
    result = trainer.fit()
    assert RunStore().get(result.run_uri).data_uri == "s3://voice-dataset/zh-cn/"
    assert trainer.variant({"lr": 1e-4}).new_data == "s3://voice-dataset/zh-cn/"  # tuning trials keep the data
    assert result.status == "finished" and np.isfinite(result.metrics["val_mel_l1"])
    assert trainer.settings.max_steps == 9 and result.plan.micro_batch_size == 4
    voice, *_ = Trainer.from_checkpoint(result.run_uri, mode="finetune", verbose=False).model_for_export()
    assert len(voice.speak("你好，世界。")) > 0
