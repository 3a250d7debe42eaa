"""``MelOTTS``: MeloTTS-style text-to-speech in Twinkle's engine — a VITS-style network
(``twinkle_audio.vits.network``) over the offline front ends' phones, tones and languages, trained on a
voice corpus (``SpeechDataProcessor``).

Two decoders (``vocoder=``):

- ``"griffin-lim"`` (default): latent frames → log-magnitude spectrogram, spoken through Griffin-Lim — the fast,
  vocoder-free path that keeps CPU training and CI quick. The loss is the spectrogram's and log-mel's L1, the KL
  between posterior and flowed prior, and the duration predictor's error on the durations monotonic alignment
  search finds.
- ``"hifigan"``: VITS proper — coqui's HiFi-GAN generator turns random segments of latent frames into waveforms,
  trained against coqui's VITS discriminator (multi-period and multi-scale) with least-squares adversarial and
  feature-matching losses besides the reconstruction, KL and duration terms; VITS2's duration discriminator
  trains the duration predictor adversarially as well. The algorithm steps its generator
  and discriminator optimizers itself (manual optimization: no gradient accumulation); a step is one batch.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch

from twinkle_core import Algorithm, PredictionFile
from twinkle_core.data import DataSpec
from twinkle_core.errors import TwinkleError
from twinkle_core.pretrained import (
    Weights,
    WeightsMismatchError,
    WeightsReport,
    load_weights,
    read_weights,
    state_of,
)
from twinkle_core.types import PositiveFloat, PositiveInt

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden": 96, "inter": 96, "ffn": 256, "heads": 2, "encoder_layers": 3, "posterior_layers": 6,
             "flows": 4, "decoder_layers": 6, "speaker_channels": 64, "n_fft": 512, "hop": 128, "n_mels": 64,
             "generator_channels": 128},
    "base": {"hidden": 192, "inter": 192, "ffn": 768, "heads": 2, "encoder_layers": 6, "posterior_layers": 16,
             "flows": 4, "decoder_layers": 10, "speaker_channels": 256, "n_fft": 1024, "hop": 256, "n_mels": 80,
             "generator_channels": 512},
}
"""Network and spectrogram sizes of each variant."""
SAMPLES_KEPT = 4
"""Held-out sentences spoken and saved with the run at every validation."""


class MelOTTS(Algorithm):
    """MeloTTS-style voice model (random init unless ``weights=``); see the module docstring."""

    task = "text_to_speech"
    data_keyword = "voice_samples"
    size: ClassVar[str] = "tiny"
    optimizer_defaults = {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.01}
    supports_mixed_precision = False

    def __init__(self, weights: str | None = None, c_reconstruction: PositiveFloat = 10.0,
                 noise_scale: float = 0.667, length_scale: PositiveFloat = 1.0,
                 griffin_lim_iterations: PositiveInt = 32, alignment_prior: float = 1.0,
                 alignment_prior_steps: PositiveInt = 100_000, c_kl: PositiveFloat = 0.1,
                 vocoder: Literal["griffin-lim", "hifigan"] = "griffin-lim", segment_frames: PositiveInt = 32,
                 transformer_flow: bool = True, speaker_text_encoder: bool = True, mas_noise: float = 0.01,
                 mas_noise_decay: float = 2e-6, duration_discriminator: bool = True, bert: str | None = None,
                 discriminator_periods: tuple[PositiveInt, ...] = (2, 3, 5, 7, 11)) -> None:
        """Declare the hyperparameters.

        Args:
            weights: what a new voice fine-tunes from (never downloaded): a Twinkle run (``twinkle://…``: its
                best checkpoint), a checkpoint file or a state dict at any path or URI, or a released MeloTTS
                checkpoint (``checkpoint.pth``, or its folder; ``load_voice_weights``). Tensors it has no match
                for — a speaker table of another size for a corpus with other speakers, MeloTTS's parts that
                differ — keep their fresh initialisation and are reported (``weights_report``, the run's
                ``weights.json``, and a warning).
            c_reconstruction: weight of the spectrogram and log-mel L1 against the KL and duration terms.
            c_kl: weight of the KL term (0.1: at CPU-scale step counts, held-out MCD-DTW after 150 steps was
                12.6 dB with 0.1 and 14.1 dB with VITS's 1.0 — the posterior stays informative).
            noise_scale: the prior's sampling temperature when speaking. length_scale: slower (> 1) or faster.
            griffin_lim_iterations: phase-recovery iterations when speaking.
            alignment_prior: weight of the beta-binomial diagonal prior in the alignment search at step 0; it
                falls linearly to 0 at ``alignment_prior_steps`` (0 turns it off: plain VITS).
            vocoder: ``"griffin-lim"`` (spectrogram decoder) or ``"hifigan"`` (waveform decoder trained as a GAN;
                see the module docstring).
            segment_frames: with HiFi-GAN, the latent frames per clip decoded to a waveform at each step.
            transformer_flow: VITS2's flow (a transformer block in every coupling layer); off: VITS's.
            speaker_text_encoder: VITS2's speaker-conditioned text encoder; off: VITS's.
            mas_noise: VITS2's noise-scaled alignment search at step 0, falling by ``mas_noise_decay`` a step.
            duration_discriminator: with HiFi-GAN, VITS2's duration discriminator trains the duration
                predictor adversarially too.
            bert: a local folder with a BERT-style model and fast tokenizer (``save_pretrained``) whose
                per-word hidden states join each phone's embedding (MeloTTS's BERT features;
                ``BertFeatures``). Off by default; never downloaded.
            discriminator_periods: with HiFi-GAN, the periods of the multi-period discriminator (VITS's
                ``periods_multi_period_discriminator``); each period is a discriminator of about 8 M parameters,
                so fewer periods train faster and checkpoint smaller (the scale discriminator is always there).
        """
        super().__init__()
        self.weights, self.c_reconstruction = weights, c_reconstruction
        self.noise_scale, self.length_scale, self.griffin_lim_iterations = noise_scale, length_scale, griffin_lim_iterations
        self.alignment_prior, self.alignment_prior_steps = alignment_prior, alignment_prior_steps
        self.c_kl, self.vocoder, self.segment_frames = c_kl, vocoder, segment_frames
        self.transformer_flow, self.speaker_text_encoder = transformer_flow, speaker_text_encoder
        self.mas_noise, self.mas_noise_decay = mas_noise, mas_noise_decay
        self.use_duration_discriminator = duration_discriminator
        self.bert, self._bert = bert, None
        self.discriminator_periods = tuple(int(p) for p in discriminator_periods)
        self.duration_discriminator: torch.nn.Module | None = None
        self.automatic_optimization = vocoder == "griffin-lim"
        self.features: Any = None
        self.discriminator: torch.nn.Module | None = None
        self._parts: dict[str, torch.Tensor] = {}
        self._baselines: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------ model
    def build_model(self, spec: DataSpec) -> torch.nn.Module:
        """The network for the corpus's phone inventory, speakers and sample rate."""
        from twinkle_audio.vits.features import Spectrogram
        from twinkle_audio.vits.network import VitsMel

        if spec.task != "text_to_speech" or "sample_rate" not in spec.extra:
            raise TwinkleError(f"{type(self).__name__} trains on a voice corpus (the voice-folder data processor)")
        sizes = dict(SIZES[type(self).size])
        self.features = Spectrogram(int(spec.extra["sample_rate"]), sizes.pop("n_fft"), sizes["hop"],
                                    sizes.pop("n_mels"))
        if self.bert:
            from twinkle_audio.bert import BertFeatures

            self._bert = BertFeatures(self.bert)
        net = VitsMel(int(spec.vocab_size or 0), int(spec.extra["num_tones"]), int(spec.extra["num_languages"]),
                      max(len(spec.class_names), 1), self.features.bins, vocoder=self.vocoder,
                      transformer_flow=self.transformer_flow, speaker_text_encoder=self.speaker_text_encoder,
                      bert_channels=self._bert.channels if self._bert else 0, **sizes)
        if self.vocoder == "hifigan":
            from TTS.tts.layers.vits.discriminator import VitsDiscriminator

            self.discriminator = VitsDiscriminator(periods=self.discriminator_periods)
            if self.use_duration_discriminator:
                from twinkle_audio.vits.network import DurationDiscriminator

                self.duration_discriminator = DurationDiscriminator(sizes["hidden"],
                                                                    speaker_channels=sizes["speaker_channels"])
        if self.weights:
            self.weights_report = load_voice_weights(net, self.weights)
        return net

    def example_input(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        """A batch of random phones and one second of noise per clip (the planner's test forward)."""
        spec = self.data_spec
        rate = int(spec.extra["sample_rate"])
        length = min(int(spec.input_shape[0]), 32)
        return {"phones": torch.randint(1, int(spec.vocab_size), (batch_size, length)),
                "tones": torch.zeros(batch_size, length, dtype=torch.long),
                "languages": torch.ones(batch_size, length, dtype=torch.long),
                "phone_lengths": torch.full((batch_size,), length), "audio": torch.randn(batch_size, rate) * 0.1,
                "audio_lengths": torch.full((batch_size,), rate), "speakers": torch.zeros(batch_size, dtype=torch.long)}

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:  # type: ignore[override]
        """The training forward of a batch: its loss terms (see ``batch_loss``)."""
        spec = self.features.log_magnitude(batch["audio"])
        frames = self.features.frames(batch["audio_lengths"])
        (phones, tones, languages), lengths = _with_blanks(batch["phones"], batch["tones"], batch["languages"],
                                                           lengths=batch["phone_lengths"])
        prior = self.alignment_prior * max(0.0, 1.0 - self.global_step / self.alignment_prior_steps)
        noise = max(0.0, self.mas_noise - self.mas_noise_decay * self.global_step) if self.training else 0.0
        out = self.model(phones, tones, languages, lengths, spec, frames, batch["speakers"], prior_weight=prior,
                         segment_frames=self.segment_frames, mas_noise=noise, bert=self._bert_of(batch))
        if self.vocoder == "hifigan":  # the generated segments against the same stretches of the recordings
            from TTS.tts.utils.helpers import segment

            hop = self.features.hop
            real = segment(batch["audio"].unsqueeze(1), out["segment_starts"] * hop, self.segment_frames * hop,
                           pad_short=True)
            self._waves = (real, out["wave_hat"])
            self._durations = out
            spec_real, spec_fake = (self.features.log_magnitude(w.squeeze(1)) for w in self._waves)
            magnitude = torch.mean(torch.abs(spec_fake - spec_real))
            mel = torch.mean(torch.abs(self.features.log_mel(spec_fake) - self.features.log_mel(spec_real)))
        else:
            mask = out["mask"]
            count = mask.sum()
            magnitude = torch.sum(torch.abs(out["spec_hat"] - spec) * mask) / (count * self.features.bins)
            mel = torch.sum(torch.abs(self.features.log_mel(out["spec_hat"]) - self.features.log_mel(spec)) * mask) / (
                count * self.features.n_mels)
        return {"magnitude_l1": magnitude, "mel_l1": mel, "kl": out["kl"], "duration": out["duration"]}

    def _bert_of(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """The batch's per-phone BERT features, blanks interleaved (``None`` without BERT)."""
        if self._bert is None:
            return None
        if "texts" not in batch:  # the planner's random example: features of the right shape
            phones = batch["phones"]
            return torch.zeros(phones.shape[0], 2 * phones.shape[1] + 1, self._bert.channels, device=phones.device)
        from twinkle_audio.text import phonemize

        lang = str(self.data_spec.extra["lang"])
        sentences = [phonemize(text, lang) for text in batch["texts"]]
        for text, phonemes, length in zip(batch["texts"], sentences, batch["phone_lengths"].tolist()):
            if len(phonemes) != length:
                raise TwinkleError(f"BERT features: {text!r} reads as {len(phonemes)} phones now but {length} in the "
                                   "corpus; the front end changed since the data was prepared")
        return _blank_features(self._bert.phone_features(sentences, batch["phones"].shape[1], self.device))

    @property
    def monitor(self) -> tuple[str, Literal["min", "max"]]:
        """The held-out log-mel L1 (teacher-forced) picks the best checkpoint."""
        return "val_mel_l1", "min"

    def eval_batch_size(self, micro_batch_size: int) -> int:
        """Validation batches as large as training ones (clips are long)."""
        return micro_batch_size

    # ----------------------------------------------------------------- steps
    def batch_loss(self, batch: Any) -> torch.Tensor:
        """``c_reconstruction × (magnitude L1 + log-mel L1) + c_kl × KL + duration``."""
        parts = self(batch)
        self._parts = {k: v.detach() for k, v in parts.items()}  # for logging; kept off the graph (and copyable)
        return (self.c_reconstruction * (parts["magnitude_l1"] + parts["mel_l1"]) + self.c_kl * parts["kl"]
                + parts["duration"])

    def configure_optimizers(self) -> Any:
        """Core's optimizer (``optimizer``, ``lr``, ``weight_decay``, ``scheduler``) — for HiFi-GAN one for the
        generator (the network), one for the discriminator and one for the duration discriminator, without a
        schedule."""
        if self.vocoder != "hifigan":
            return super().configure_optimizers()
        optimizers = [self.build_optimizer(list(self.model.parameters())),
                      self.build_optimizer(list(self.discriminator.parameters()))]
        if self.duration_discriminator is not None:
            optimizers.append(self.build_optimizer(list(self.duration_discriminator.parameters())))
        return optimizers

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """Loss and its parts, logged as ``train_loss``, ``train_mel_l1``, ``train_kl``, ``train_duration``
        (and, with HiFi-GAN, ``train_discriminator``, ``train_adversarial``, ``train_feature_matching``)."""
        if self.vocoder == "hifigan":
            return self._adversarial_step(batch)
        loss = self.batch_loss(batch)
        size = len(batch["phones"])
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=size)
        self.log_dict({f"train_{k}": v.detach() for k, v in self._parts.items()}, on_step=False, on_epoch=True,
                      batch_size=size)
        return loss

    def _adversarial_step(self, batch: Any) -> torch.Tensor:
        """One VITS2 step: the discriminator on real and (detached) generated segments and the duration
        discriminator on the alignment's and the predictor's durations, then the generator on reconstruction,
        KL, duration, adversarial, feature-matching and duration-adversarial losses."""
        from TTS.tts.layers.losses import VitsDiscriminatorLoss, feature_loss, generator_loss

        generator_opt, discriminator_opt, *duration_opt = self.optimizers()
        reconstruction = self.batch_loss(batch)
        real, fake = self._waves
        scores_real, _, scores_fake, _ = self.discriminator(real, fake.detach())
        discriminator = VitsDiscriminatorLoss.discriminator_loss(scores_real, scores_fake)[0]
        _step(self, discriminator_opt, discriminator)
        logs: dict[str, torch.Tensor] = {"train_discriminator": discriminator.detach()}
        duration_adversarial = torch.zeros((), device=reconstruction.device)
        if duration_opt:
            d, judge = self._durations, self.duration_discriminator
            mask, count = d["text_mask"], d["text_mask"].sum()
            true = judge(d["text_states"], mask, d["log_durations"], d["speaker"])
            false = judge(d["text_states"], mask, d["predicted_log_durations"].detach(), d["speaker"])
            judged = (torch.sum((1 - true) ** 2 * mask) + torch.sum(false ** 2 * mask)) / count
            _step(self, duration_opt[0], judged)
            false = judge(d["text_states"], mask, d["predicted_log_durations"], d["speaker"])
            duration_adversarial = torch.sum((1 - false) ** 2 * mask) / count
            logs.update(train_duration_discriminator=judged.detach(),
                        train_duration_adversarial=duration_adversarial.detach())
        _, features_real, scores_fake, features_fake = self.discriminator(real, fake)
        adversarial = generator_loss(scores_fake)[0]
        matching = feature_loss(features_real, features_fake)
        loss = reconstruction + adversarial + matching + duration_adversarial
        generator_opt.zero_grad()
        self.manual_backward(loss)
        generator_opt.step()
        size = len(batch["phones"])
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=size)
        self.log_dict({**{f"train_{k}": v.detach() for k, v in self._parts.items()}, **logs,
                       "train_adversarial": adversarial.detach(), "train_feature_matching": matching.detach()},
                      on_step=False, on_epoch=True, batch_size=size)
        return loss.detach()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """``val_loss`` and its parts on held-out clips."""
        loss = self.batch_loss(batch)
        size = len(batch["phones"])
        self.log_dict({"val_loss": loss, **{f"val_{k}": v for k, v in self._parts.items()}}, prog_bar=True,
                      batch_size=size)
        if batch_idx == 0:
            self._held_out = [(key, text, audio[:int(length)].detach().cpu()) for key, text, audio, length in
                              zip(batch["keys"], batch["texts"], batch["audio"], batch["audio_lengths"])][:SAMPLES_KEPT]

    def on_validation_epoch_end(self) -> None:
        """Speak the first held-out sentences and score them against their recordings: ``val_mcd`` (MCD-DTW, dB)
        beside its baselines ``val_mcd_white_noise`` and ``val_mcd_mean_spectrum`` (averaged over ranks). Rank
        zero saves them with the run: ``samples/epoch-NNN/`` holds each as a WAV and a PNG of its log-mel
        spectrogram over the recording's."""
        import os

        from twinkle_audio.quality import baseline_scores, mcd_dtw

        trainer = self.trainer
        if trainer.sanity_checking or not getattr(self, "_held_out", None):
            return
        rate = int(self.data_spec.extra["sample_rate"])
        folder = os.path.join(trainer.default_root_dir, "samples", f"epoch-{self.current_epoch:03d}")
        totals: dict[str, float] = {}
        for key, text, recording in self._held_out:
            spoken = self.speak(text)
            if key not in self._baselines:  # the noise baselines of a recording never change
                self._baselines[key] = baseline_scores(recording.numpy(), rate)
            for name, value in {"mcd": mcd_dtw(recording.numpy(), spoken, rate), **self._baselines[key]}.items():
                totals[name] = totals.get(name, 0.0) + value / len(self._held_out)
            if trainer.is_global_zero:
                _save_sample(os.path.join(folder, key.rsplit(".", 1)[0]), spoken, recording.numpy(), rate, text,
                             self.features)
        self.log_dict({f"val_{name}": value for name, value in totals.items()})

    # ------------------------------------------------------ evaluate/predict
    def on_test_epoch_start(self) -> None:
        """Start the test set's per-clip scores."""
        self._test_clips: list[dict[str, Any]] = []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """``test_loss`` and its parts (teacher-forced, as validation computes them), and every clip spoken from
        its text by its speaker and scored against its recording: MCD-DTW beside its two noise baselines, as
        validation scores its held-out sentences (``val_mcd``)."""
        from twinkle_audio.quality import baseline_scores, mcd_dtw

        loss = self.batch_loss(batch)
        self.log_dict({"test_loss": loss, **{f"test_{k}": v for k, v in self._parts.items()}},
                      batch_size=len(batch["phones"]))
        rate, speakers = int(self.data_spec.extra["sample_rate"]), list(self.data_spec.extra["speakers"])
        for key, text, audio, length, speaker in zip(batch["keys"], batch["texts"], batch["audio"],
                                                     batch["audio_lengths"], batch["speakers"]):
            recording = audio[:int(length)].cpu().numpy()
            spoken = self.speak(text, speaker=int(speaker))
            self._test_clips.append({"id": key, "text": text, "speaker": speakers[int(speaker)],
                                     "seconds": round(len(spoken) / rate, 3), "mcd": mcd_dtw(recording, spoken, rate),
                                     **baseline_scores(recording, rate)})

    def on_test_epoch_end(self) -> None:
        """Log the clips' mean ``test_mcd``, ``test_mcd_white_noise`` and ``test_mcd_mean_spectrum``."""
        names = ("mcd", "mcd_white_noise", "mcd_mean_spectrum")
        self._test_means = {name: float(np.mean([clip[name] for clip in self._test_clips])) for name in names}
        self.log_dict({f"test_{name}": value for name, value in self._test_means.items()})

    @property
    def evaluation_needs_outputs(self) -> bool:
        """The clips are spoken and scored in the test pass: nothing else is gathered."""
        return False

    def evaluation_report(self, outputs: torch.Tensor, targets: torch.Tensor, spec: DataSpec) -> Any:
        """The mean MCD-DTW and its baselines (exact, not the logger's float32), every clip's scores
        (``per_clip``) and a chart of them (``mcd.png``)."""
        from twinkle_core import EvaluationReport

        clips = getattr(self, "_test_clips", [])
        return EvaluationReport(dict(getattr(self, "_test_means", {})), {"per_clip": clips},
                                {"mcd.png": _mcd_chart(clips)} if clips else {})

    def predict_step(self, batch: Any, batch_idx: int) -> list[dict[str, Any]]:
        """Each sentence spoken by the first speaker (``speak``, seed 0), as the WAV ``synthesize`` writes."""
        rate, rows = int(self.data_spec.extra["sample_rate"]), []
        for text in batch["texts"]:
            spoken = self.speak(text)
            rows.append({"text": text, "seconds": round(len(spoken) / rate, 3),
                         "audio": PredictionFile.wav(spoken, rate)})
        return rows

    def prediction_rows(self, outputs: Any, spec: DataSpec) -> list[dict[str, Any]]:
        """``predict_step``'s rows: the ``text``, the speech's ``seconds`` and its ``audio`` (the WAV's path)."""
        return list(outputs)

    # ---------------------------------------------------------------- export
    def export_module(self) -> torch.nn.Module:
        """``SpeechGraph`` over the network (the ONNX and TorchScript exporters trace it)."""
        return SpeechGraph(self.model)

    def export_inputs(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """A validation batch's sentences as ``SpeechGraph``'s named inputs, with the noise scale 0 (so the
        artefact and PyTorch are compared on the same, deterministic speech) and this model's length scale."""
        size = len(batch["phones"])
        inputs = {"phones": batch["phones"], "tones": batch["tones"], "languages": batch["languages"],
                  "lengths": batch["phone_lengths"], "speakers": batch["speakers"],
                  "scales": torch.tensor([[0.0, float(self.length_scale)]]).repeat(size, 1)}
        if self._bert is not None:
            from twinkle_audio.text import phonemize

            sentences = [phonemize(text, str(self.data_spec.extra["lang"])) for text in batch["texts"]]
            inputs["bert"] = self._bert.phone_features(sentences, batch["phones"].shape[1])
        return inputs

    def export_evaluate(self, pairs: Any) -> dict[str, float]:
        """No task metric: an export is judged by its spectrograms matching PyTorch's."""
        return {}

    # ----------------------------------------------------------------- speak
    def speak(self, text: str, lang: str | None = None, speaker: str | int = 0, seed: int = 0) -> np.ndarray:
        """``text`` spoken by ``speaker`` (a name or index): float32 samples at the corpus's rate. The prior's
        noise is drawn from its own generator seeded with ``seed`` (the same text, the same speech; training's
        random state is left alone)."""
        from twinkle_audio.text import phonemize

        spec = self.data_spec
        lang = lang or str(spec.extra["lang"])
        speakers = list(spec.extra["speakers"])
        index = speakers.index(speaker) if isinstance(speaker, str) and speaker in speakers else speaker
        if not isinstance(index, int) or not 0 <= index < len(speakers):
            raise TwinkleError(f"unknown speaker {speaker!r}; this voice has {', '.join(map(str, speakers))}")
        phonemes = phonemize(text, lang)
        as_tensor = lambda values: torch.tensor([values], device=self.device)  # noqa: E731
        (phones, tones, languages), lengths = _with_blanks(
            as_tensor(phonemes.phone_ids), as_tensor(phonemes.tones), as_tensor(phonemes.language_ids),
            lengths=torch.tensor([len(phonemes)], device=self.device))
        bert = None if self._bert is None else _blank_features(
            self._bert.phone_features([phonemes], len(phonemes), self.device))
        self.model.eval()
        log_magnitude, _ = self.model.infer(phones, tones, languages, lengths,
                                            torch.tensor([index], device=self.device), self.noise_scale,
                                            self.length_scale,
                                            generator=torch.Generator(device=self.device).manual_seed(seed),
                                            bert=bert)
        if self.vocoder == "hifigan":
            audio = log_magnitude[0, 0]  # the generator's waveform
        else:
            audio = self.features.griffin_lim(log_magnitude, self.griffin_lim_iterations)[0]
        return audio.clamp(-1, 1).cpu().numpy().astype(np.float32)


    def synthesize(self, text: str, lang: str | None = None, speaker: str | int = 0) -> tuple[np.ndarray, int]:
        """``text`` spoken (``speak``) and the sample rate — what ``Trainer.synthesize`` writes as a WAV."""
        return self.speak(text, lang, speaker), int(self.data_spec.extra["sample_rate"])


def _step(module: Any, optimizer: Any, loss: torch.Tensor) -> None:
    """Backward and step a discriminator's optimizer, unwrapped, so Lightning counts one step per batch (the
    generator's). MelOTTS trains in full precision, so no precision plugin is bypassed; ``manual_backward``
    has synchronised the gradients between ranks."""
    optimizer.zero_grad()
    module.manual_backward(loss)
    optimizer.optimizer.step()


MELOTTS_RENAMES: list[tuple[str, str]] = [
    (r"^(.*)\.weight_g$", r"\1.parametrizations.weight.original0"),
    (r"^(.*)\.weight_v$", r"\1.parametrizations.weight.original1"),
    (r"^dec\.cond\.", "dec.cond_layer."),
    (r"^enc_p\.encoder\.spk_emb_linear\.", "enc_p.speaker_proj."),
]
"""How MeloTTS's names (``melo/models.py``'s ``SynthesizerTrn``) become this network's: the legacy weight norm's
``weight_g``/``weight_v`` are the parametrization's ``original0``/``original1``; the decoder's speaker input and the
text encoder's speaker projection have other names; the flow's couplings are every other of MeloTTS's
``flow.flows`` (its odd ones are parameterless flips)."""


def melotts_name(name: str) -> str | None:
    """This network's name for a MeloTTS checkpoint's tensor ``name`` (``None`` for a flip's: it has none)."""
    import re

    flow = re.match(r"^flow\.flows\.(\d+)\.(.*)$", name)
    if flow:
        index = int(flow.group(1))
        if index % 2:
            return None
        name = f"flow.flows.{index // 2}.{flow.group(2)}"
    for pattern, replacement in MELOTTS_RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def _is_melotts(names: Any) -> bool:
    return any(n.endswith((".weight_g", ".weight_v")) or n.startswith(("sdp.", "enc_p.encoder.spk_emb_linear."))
               for n in names)


def load_voice_weights(network: torch.nn.Module, uri: str) -> WeightsReport:
    """Load ``uri`` into ``network`` name by name (``twinkle_core.pretrained``) and report it; tensors with no
    counterpart keep their fresh initialisation and are listed in a warning (once, from rank zero).

    ``uri`` is a Twinkle run (``twinkle://…``: its best checkpoint), a Twinkle checkpoint or state dict, or a
    released MeloTTS checkpoint (``checkpoint.pth``, its weights under ``model``; or its folder with
    ``config.json``): MeloTTS's names are mapped (``melotts_name``) and it initialises the parts whose
    architecture agrees — the report names what did not (MeloTTS's stochastic duration predictor, a decoder
    or vocabulary of other sizes).

    Raises:
        TwinkleError: a run without a checkpoint; Twinkle weights sharing fewer than half the network's tensors
            (not a MelOTTS of this size); a MeloTTS file of which nothing fits.
    """
    from lightning.pytorch.utilities import rank_zero_warn

    from twinkle_core import RunStore, load_torch_file

    source = uri
    if uri.startswith("twinkle://") and not uri.endswith(".ckpt"):
        record = RunStore().get(uri)
        source = record.best_checkpoint
        if not source:
            raise TwinkleError(f"run {uri} has no checkpoint to take weights= from; train it first")
    if source.endswith(".ckpt"):  # a Twinkle checkpoint: a file, or a folder of shards (load_torch_file reads both)
        weights = Weights(state_of(load_torch_file(source, "weights"))[0], "twinkle-checkpoint", {}, source)
    else:
        weights = read_weights(source)
    own = network.state_dict()
    melotts = _is_melotts(weights.tensors)
    if melotts:
        rename: Any = melotts_name
        for name, tensor in list(weights.tensors.items()):  # a 1×1 convolution where this network has a Linear
            target = melotts_name(name)
            if target in own and own[target].dim() == 2 and tensor.dim() == 3 and tensor.shape[-1] == 1:
                weights.tensors[name] = tensor[..., 0]
    elif any(name.startswith("model.") for name in weights.tensors):  # a Twinkle checkpoint: the network's part
        def rename(name: str) -> str | None:
            return name[len("model."):] if name.startswith("model.") else None
    else:
        rename = None
    try:
        report = load_weights(network, weights, rename=rename, partial=True)
    except WeightsMismatchError:
        if melotts:
            raise
        report = WeightsReport(weights.source, weights.format)  # nothing fits: refused just below
    if melotts:
        report.notes.append(f"a MeloTTS checkpoint: {report.loaded} of its {len(weights.tensors)} tensors initialise "
                            f"this network; {len(report.fresh)} of the network's start fresh")
    elif report.loaded < len(own) / 2:
        raise TwinkleError(f"weights '{uri}' match only {report.loaded} of this network's {len(own)} tensors; pass "
                           f"the weights of a {type(network).__name__} of the same size (melotts-tiny or -base), or "
                           "a MeloTTS checkpoint")
    if report.fresh:
        rank_zero_warn(f"weights '{uri}': {len(report.fresh)} tensors had no match and start fresh: "
                       f"{', '.join(report.fresh)}")
    return report


def _with_blanks(*sequences: torch.Tensor, lengths: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """VITS's ``add_blank``: the pad id (0) between every two phones and at both ends, so the alignment can give
    each transition frames of its own; lengths become ``2 × length + 1``. Traceable (ONNX: any length)."""
    out = []
    for values in sequences:
        spread = torch.stack([torch.zeros_like(values), values], dim=-1).flatten(1)
        out.append(torch.cat([spread, torch.zeros_like(values[:, :1])], dim=1))
    return out, 2 * lengths + 1


def _blank_features(features: torch.Tensor) -> torch.Tensor:
    """Per-phone features ``[B, L, C]`` spread like ``_with_blanks`` spreads ids: zeros for the blanks."""
    spread = torch.stack([torch.zeros_like(features), features], dim=2).flatten(1, 2)
    return torch.cat([spread, torch.zeros_like(features[:, :1])], dim=1)


class SpeechGraph(torch.nn.Module):
    """What MelOTTS exports: phones → log-magnitude spectrogram (Griffin-Lim runs outside the graph, on its
    output) or, with HiFi-GAN, the waveform — the durations predicted and the prior sampled inside.

    Inputs (``B`` sentences of up to ``L`` phones, 0-padded): ``phones``, ``tones``, ``languages`` ``[B, L]``
    int64, ``lengths`` ``[B]`` int64, ``speakers`` ``[B]`` int64 and ``scales`` ``[B, 2]`` float (noise scale,
    length scale; noise scale 0 makes the graph deterministic) and, for a voice with BERT features, ``bert``
    ``[B, L, C]`` (each phone's, from ``BertFeatures``). Outputs: ``output`` ``[B, bins, F]`` (log
    magnitudes; padded frames hold ``log(1e-5)``) or ``[B, 1, F × hop]`` (samples; padding silent) and
    ``output_1`` ``[B]`` (each sentence's frame count).
    """

    def __init__(self, network: torch.nn.Module) -> None:
        """Wrap a trained ``VitsMel``."""
        super().__init__()
        self.network = network

    def forward(self, phones: torch.Tensor, tones: torch.Tensor, languages: torch.Tensor, lengths: torch.Tensor,
                speakers: torch.Tensor, scales: torch.Tensor,
                bert: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Spectrograms and frame counts (see the class docstring)."""
        (phones, tones, languages), lengths = _with_blanks(phones, tones, languages, lengths=lengths)
        return self.network.infer(phones, tones, languages, lengths, speakers, scales[:, 0], scales[:, 1],
                                  bert=None if bert is None else _blank_features(bert))


def _mcd_chart(clips: list[dict[str, Any]]) -> bytes:
    """Each clip's MCD-DTW beside its white-noise and mean-spectrum baselines, as a PNG bar chart."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = clips[:40]
    positions = np.arange(len(shown))
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(shown) + 2), 4))
    for offset, (name, label) in enumerate((("mcd", "spoken"), ("mcd_mean_spectrum", "mean spectrum"),
                                            ("mcd_white_noise", "white noise"))):
        ax.bar(positions + (offset - 1) * 0.27, [clip[name] for clip in shown], 0.27, label=label)
    ax.set_xticks(positions, [str(clip["id"]) for clip in shown], rotation=90, fontsize=7)
    ax.set_ylabel("MCD-DTW (dB, lower is closer)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _save_sample(stem: str, spoken: np.ndarray, recording: np.ndarray, rate: int, text: str, features: Any) -> None:
    """``<stem>.wav`` (the voice) and ``<stem>.png`` (its log-mel over the recording's), written atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import soundfile

    from twinkle_core.data import atomic_write_bytes

    buffer = io.BytesIO()
    soundfile.write(buffer, spoken, rate, format="WAV", subtype="PCM_16")
    atomic_write_bytes(stem + ".wav", buffer.getvalue())
    with torch.no_grad():
        mels = [features.log_mel(features.log_magnitude(torch.from_numpy(np.ascontiguousarray(a))[None]))[0].numpy()
                for a in (spoken, recording)]
    figure, axes = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True)
    for axis, mel, title in zip(axes, mels, ("spoken by the model", "recording")):
        axis.imshow(mel, origin="lower", aspect="auto", interpolation="none")
        axis.set_title(f"{title}: {text[:60]}", fontsize=9)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=80)
    plt.close(figure)
    atomic_write_bytes(stem + ".png", image.getvalue())


class MelOTTSBase(MelOTTS):
    """The larger MelOTTS (GPU-sized: 192 channels, 6 encoder layers, 1024-point FFT)."""

    size = "base"
