"""twinkle-audio's journey from its wheel: list, phonemize, train melotts-tiny on generated speech, export ONNX,
speak, continue."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from common import continued, start


def main(work: Path) -> None:
    """Run the journey in ``work`` (its data and run store)."""
    start("audio", "twinkle_audio")
    twinkle = Path(sys.executable).with_name("twinkle")
    phones = subprocess.run([str(twinkle), "tts", "phonemize", "你好，世界", "--lang", "zh-cn"], check=True,
                            capture_output=True, text=True).stdout
    assert phones.strip(), "twinkle tts phonemize printed nothing"
    from twinkle_audio import MelOTTS
    from twinkle_audio.samples import write_espeak_corpus

    from twinkle_core import Trainer

    corpus = write_espeak_corpus(work / "voice", "en", count=16, rate=16000)
    trainer = Trainer(algorithm=MelOTTS, voice_samples=str(corpus), lang="en", steps=8, sample_rate=16000,
                      batch_size=4, home=str(work / "home"), progress_bar=False)
    result = trainer.fit()
    assert result.status == "finished", result.status
    exported = trainer.export(format="onnx")
    print(f"exported: {exported.path} max |diff| {exported.max_abs_diff:.2g}")
    wav = trainer.synthesize("Hello there.", output=str(work / "hello.wav"))
    assert Path(wav).stat().st_size > 1000
    child = continued(result.run_uri, work, max_steps=12)
    print(f"trained {result.run_uri}, spoke {wav}, continued as {child}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
