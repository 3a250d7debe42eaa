"""``twinkle llm``: language models from the command line (registered through ``register_commands``).

Light at import: the run's model is loaded when a command runs.
"""

from __future__ import annotations

import click


@click.group()
def llm() -> None:
    """Language models: generate text with a trained run."""


@llm.command("generate")
@click.argument("run")
@click.argument("prompt")
@click.option("--chat", is_flag=True, help="Send PROMPT as the user's turn of a conversation (the run's chat "
              "template) instead of raw text to continue.")
@click.option("--system", help="With --chat: a system message first.")
@click.option("--max-new-tokens", default=64, show_default=True, type=click.IntRange(min=1),
              help="Tokens to write at most (it stops earlier at the end-of-text token).")
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0.0),
              help="0: greedy; above 0: sample.")
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0.0, 1.0, min_open=True),
              help="Nucleus sampling's probability mass (with --temperature above 0).")
@click.option("--seed", default=0, show_default=True, type=int, help="The sampling seed.")
def generate(run: str, prompt: str, chat: bool, system: str | None, max_new_tokens: int, temperature: float,
             top_p: float, seed: int) -> None:
    """Print what the model of RUN (twinkle://user/project/runN, its best checkpoint, or a checkpoint file)
    writes after PROMPT."""
    from transformers.utils import logging as transformers_logging

    from twinkle_core import Trainer

    transformers_logging.disable_progress_bar()  # stdout and stderr carry the answer and errors only
    if system and not chat:
        raise click.UsageError("--system is part of a conversation: add --chat")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    trainer = Trainer.from_checkpoint(run, mode="finetune", verbose=False)
    click.echo(trainer.generate(messages if chat else prompt, max_new_tokens=max_new_tokens,
                                temperature=temperature, top_p=top_p, seed=seed))
