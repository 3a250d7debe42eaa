"""``QualityProbe``: a Lightning callback that, every N optimizer steps, speaks held-out sentences and
scores them with ``twinkle_audio.quality`` — the curve of MCD-DTW, closed-set identification and Whisper
word error rate along a run (``bench/tts_quality.py``, ``tools/gpu_check.py``)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np


class QualityProbe(L.Callback):
    """Every ``every_n_steps`` steps (and after the last), rank zero speaks ``texts`` with the model being
    trained and appends a row to ``path`` (a JSON list, rewritten atomically): the step, MCD-DTW against
    ``recordings`` and both noise baselines (dB), closed-set identification among ``texts``, Whisper tiny.en's
    word error rate (English), and the real-time factor of speaking in PyTorch (seconds of compute per second
    of speech). Other ranks go on; nothing is logged to the run's metrics.

    Args:
        texts: the held-out sentences (not in the training corpus).
        recordings: their recordings at ``rate`` (float32 mono).
        rate: the corpus's sample rate.
        path: where the rows go (a local file).
        every_n_steps: how often.
        lang: the sentences' language (identification and WER are English-only; other languages get MCD).
    """

    def __init__(self, texts: Sequence[str], recordings: Sequence[np.ndarray], rate: int, path: str,
                 every_n_steps: int, lang: str = "en") -> None:
        """Keep what each probe needs."""
        self.texts, self.recordings, self.rate = list(texts), list(recordings), rate
        self.path, self.every_n_steps, self.lang = path, every_n_steps, lang
        self.rows: list[dict[str, Any]] = []
        self._last_step = -1

    def probe(self, trainer: L.Trainer, module: Any) -> dict[str, Any]:
        """Speak and score now (rank zero); returns the row appended."""
        from twinkle_audio.quality import baseline_scores, closed_set_identification, mcd_dtw, word_error_rate
        from twinkle_core.data import atomic_write_bytes

        was_training = module.training
        started = time.perf_counter()
        spoken = [module.speak(text, lang=self.lang) for text in self.texts]
        speaking = time.perf_counter() - started
        module.train(was_training)
        seconds = sum(len(clip) for clip in spoken) / self.rate
        baselines = [baseline_scores(recording, self.rate) for recording in self.recordings]
        row: dict[str, Any] = {
            "step": int(trainer.global_step), "epoch": int(trainer.current_epoch),
            "mcd": float(np.mean([mcd_dtw(r, s, self.rate) for r, s in zip(self.recordings, spoken)])),
            "mcd_white_noise": float(np.mean([b["mcd_white_noise"] for b in baselines])),
            "mcd_mean_spectrum": float(np.mean([b["mcd_mean_spectrum"] for b in baselines])),
            "rtf_torch": speaking / max(seconds, 1e-9), "spoken_seconds": seconds,
            "spoken_vs_recorded_length": seconds / (sum(len(r) for r in self.recordings) / self.rate),
        }
        if self.lang == "en":
            row["closed_set_id"] = closed_set_identification(spoken, self.texts, self.rate)
            row["whisper_wer"] = word_error_rate(spoken, self.texts, self.rate)
        row["train_loss"] = float(trainer.callback_metrics.get("train_loss_step", float("nan")))
        self.rows.append(row)
        atomic_write_bytes(self.path, json.dumps(self.rows, indent=1).encode())
        print(json.dumps(row), flush=True)
        return row

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Probe at every ``every_n_steps``-th optimizer step (rank zero)."""
        step = trainer.global_step
        if trainer.is_global_zero and step % self.every_n_steps == 0 and step != self._last_step:
            self._last_step = step
            self.probe(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A last probe at the final step."""
        if trainer.is_global_zero and trainer.global_step != self._last_step:
            self._last_step = trainer.global_step
            self.probe(trainer, pl_module)


def held_out_corpus(folder: str, clips: int, held_out: int = 12, rate: int = 16000,
                    seed: int = 0) -> tuple[str, list[str], list[np.ndarray]]:
    """An espeak-ng English training corpus of ``clips`` generated sentences under ``folder/train`` and
    ``held_out`` other sentences with their recordings (never trained on): ``(corpus path, texts,
    recordings)`` — what a ``QualityProbe`` scores against."""
    from pathlib import Path

    import soundfile

    from twinkle_audio.samples import english_sentences, write_espeak_corpus

    sentences = english_sentences(clips + held_out, seed=seed)
    train = write_espeak_corpus(Path(folder) / "train", "en", count=clips, rate=rate, sentences=sentences[:clips])
    held = write_espeak_corpus(Path(folder) / "held-out", "en", count=held_out, rate=rate,
                               sentences=sentences[clips:])
    recordings = [soundfile.read(held / "wavs" / f"clip{i:04d}.wav", dtype="float32")[0] for i in range(held_out)]
    return str(train), sentences[clips:], recordings


def reference_scores(texts: Sequence[str], recordings: Sequence[np.ndarray], rate: int) -> dict[str, Any]:
    """Closed-set identification and Whisper WER of the recordings themselves (the ceiling) and of white noise
    as loud (the floor)."""
    from twinkle_audio.quality import closed_set_identification, white_noise, word_error_rate

    noise = [white_noise(r) for r in recordings]
    return {name: {"closed_set_id": closed_set_identification(clips, texts, rate),
                   "whisper_wer": word_error_rate(clips, texts, rate)}
            for name, clips in (("ground_truth", list(recordings)), ("white_noise", noise))}
