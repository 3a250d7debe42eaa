"""``twinkle tts``: text-to-speech from the command line (registered through ``register_commands``).

Light at import: front ends and models are imported when a command runs.
"""

from __future__ import annotations

import json

import click


@click.group()
def tts() -> None:
    """Text-to-speech: phonemize text, and speak it with a trained voice."""


@tts.command("phonemize")
@click.argument("text")
@click.option("--lang", default="zh-cn", show_default=True, help="The language's front end: zh-cn or en.")
@click.option("--json", "as_json", is_flag=True, help="Print phones, tones, languages and ids as JSON.")
def phonemize(text: str, lang: str, as_json: bool) -> None:
    """Show TEXT as the phones, tones and languages a voice model reads (offline front ends)."""
    from twinkle_audio.text import phonemize as run

    result = run(text, lang)
    if as_json:
        click.echo(json.dumps({"words": result.words, "phones": result.phones, "tones": result.tones,
                               "languages": result.languages, "phone_ids": result.phone_ids}, ensure_ascii=False))
        return
    click.echo(f"words:  {' | '.join(result.words)}")
    click.echo(f"phones: {result}")


@tts.command("say")
@click.argument("run")
@click.argument("text")
@click.option("--output", "-o", help="The WAV to write (default: the run's samples/ folder).")
@click.option("--lang", help="The front end (default: the voice's language).")
@click.option("--speaker", default="0", show_default=True, help="A speaker's name or index.")
def say(run: str, text: str, output: str | None, lang: str | None, speaker: str) -> None:
    """Speak TEXT with the voice trained in RUN (twinkle://user/project/runN or a checkpoint) into a WAV."""
    from twinkle_core import Trainer

    chosen: str | int = int(speaker) if speaker.isdigit() else speaker
    path = Trainer.from_checkpoint(run, mode="finetune", verbose=False).synthesize(text, output, lang=lang,
                                                                                  speaker=chosen)
    click.echo(f"Wrote {path}")
