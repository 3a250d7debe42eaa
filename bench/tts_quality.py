"""How far MelOTTS-tiny gets towards intelligible speech on this CPU: the quality curve of one long run, and
the real-time factor of the exported ONNX graph.

1. espeak-ng speaks ``CLIPS`` generated English sentences (16 kHz) for training and 12 other generated
   sentences for evaluation (:func:`twinkle_audio.samples.english_sentences`: the evaluation sentences are
   never trained on). The ground truth and white noise are scored first (the ceiling and the floor).
2. ``melotts-tiny`` trains for ``STEPS`` optimizer steps (batch 8, one torch thread); every ``EVERY`` steps
   :class:`twinkle_audio.probe.QualityProbe` speaks the 12 held-out sentences and records MCD-DTW (and both
   noise baselines), closed-set identification with pocketsphinx, Whisper tiny.en WER and torch's real-time
   factor.
3. The best checkpoint is exported to ONNX (verified against PyTorch) and both real-time factors are measured
   on the held-out sentences, one thread: the graph alone in onnxruntime, the graph in torch, and the same
   with Griffin-Lim (what speaking costs).

Writes ``bench/results/tts_quality.json`` (and the curve, row by row, to ``tts_quality_curve.json`` while it
runs). It takes about an hour at the defaults; run it in the background, once:

    STEPS=3000 EVERY=250 CLIPS=400 python bench/tts_quality.py

``HYPERPARAMS`` (JSON) overrides MelOTTS's hyperparameters for an ablation, e.g.
``HYPERPARAMS='{"transformer_flow": false, "speaker_text_encoder": false, "mas_noise": 0}'`` (VITS's network);
``BENCH_RESULTS`` writes elsewhere. ``tts_quality_vits1.json`` is the same run of the network before VITS2's parts.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
RESULTS = Path(os.environ.get("BENCH_RESULTS", Path(__file__).parent / "results"))
HELD_OUT = 12


def _real_time_factors(trainer: Any, texts: list[str]) -> dict[str, Any]:
    """The exported graph's and PyTorch's seconds of compute per second of speech on the held-out sentences."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from twinkle_audio.text import phonemize

    result = trainer.export(format="onnx")
    voice, *_ = trainer.model_for_export()
    graph = voice.export_module().eval()
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(result.path, options, providers=["CPUExecutionProvider"])
    rate, hop = voice.features.sample_rate, voice.features.hop
    totals = {"onnxruntime": 0.0, "torch": 0.0, "griffin_lim": 0.0}
    seconds = 0.0
    for text in texts:
        p = phonemize(text, "en")
        feed = {"phones": np.array([p.phone_ids]), "tones": np.array([p.tones]),
                "languages": np.array([p.language_ids]), "lengths": np.array([len(p)]),
                "speakers": np.array([0]), "scales": np.array([[voice.noise_scale, voice.length_scale]],
                                                               dtype=np.float32)}
        start = time.perf_counter()
        spectrogram, frames = session.run(None, feed)
        totals["onnxruntime"] += time.perf_counter() - start
        start = time.perf_counter()
        with torch.no_grad():
            graph(*(torch.from_numpy(value) for value in feed.values()))
        totals["torch"] += time.perf_counter() - start
        start = time.perf_counter()
        voice.features.griffin_lim(torch.from_numpy(spectrogram), voice.griffin_lim_iterations)
        totals["griffin_lim"] += time.perf_counter() - start
        seconds += int(frames[0]) * hop / rate
    return {"export": {"max_abs_diff": result.max_abs_diff, "cosine": result.cosine, "samples": result.samples,
                       "size_bytes": result.size_bytes},
            "speech_seconds": round(seconds, 2),
            "rtf_onnxruntime": totals["onnxruntime"] / seconds, "rtf_torch": totals["torch"] / seconds,
            "rtf_griffin_lim": totals["griffin_lim"] / seconds,
            "rtf_onnxruntime_with_griffin_lim": (totals["onnxruntime"] + totals["griffin_lim"]) / seconds}


def main() -> None:
    """Run the benchmark; write the results."""
    import torch

    from twinkle_audio.probe import QualityProbe, held_out_corpus, reference_scores
    from twinkle_core import RunStore, Trainer

    torch.set_num_threads(1)
    steps, every = int(os.environ.get("STEPS", 3000)), int(os.environ.get("EVERY", 250))
    clips = int(os.environ.get("CLIPS", 400))
    work = Path(tempfile.mkdtemp(prefix="twinkle-tts-bench-"))
    os.environ.setdefault("TWINKLE_HOME", str(work / "home"))
    started = time.perf_counter()
    corpus, texts, recordings = held_out_corpus(str(work), clips, HELD_OUT)
    references = reference_scores(texts, recordings, 16000)
    print(json.dumps(references), flush=True)
    RESULTS.mkdir(exist_ok=True)
    probe = QualityProbe(texts, recordings, 16000, str(RESULTS / "tts_quality_curve.json"), every)
    overrides = json.loads(os.environ.get("HYPERPARAMS", "{}"))
    trainer = Trainer("melotts-tiny", hyperparams={"max_steps": steps, "max_epochs": 10_000, "batch_size": 8,
                                                   "lang": "en", "sample_rate": 16000, "progress_bar": False,
                                                   **overrides},
                      verbose=False, callbacks=[probe])
    fit_started = time.perf_counter()
    result = trainer.fit(corpus)
    fit_seconds = time.perf_counter() - fit_started
    rtf = _real_time_factors(Trainer.from_checkpoint(result.run_uri, mode="finetune", verbose=False), texts)
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": 1},
           "corpus": {"train_clips": clips, "held_out_sentences": HELD_OUT, "rate": 16000},
           "steps": steps, "batch_size": 8, "overrides": overrides,
           "hyperparams": RunStore().get(result.run_uri).hyperparams,
           "fit_seconds": round(fit_seconds, 1), "status": result.status,
           "references": references, "curve": probe.rows, "onnx": rtf,
           "total_seconds": round(time.perf_counter() - started, 1)}
    (RESULTS / "tts_quality.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("fit_seconds", "status", "onnx")}, indent=1))


if __name__ == "__main__":
    main()
