"""Fixtures for twinkle-llm's tests: CPython's own documentation as a text corpus, and llm-tiny pre-trained on it
once per session (a run store per test is twinkle-core's ``twinkle_home`` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def topics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CPython's ``pydoc_data.topics`` (the help topics of the language reference, PSF licence, shipped with every
    Python): 79 documents as JSONL lines with a ``text`` field (``twinkle_llm.samples.write_topics``)."""
    from twinkle_llm.samples import write_topics

    return write_topics(tmp_path_factory.mktemp("text") / "topics.jsonl")


PRETRAINING = {"max_epochs": 6, "max_seq_len": 128, "vocab_size": 1024, "batch_size": 8, "lr": 3e-3,
               "scheduler": "none"}
"""How ``pretrained`` trains: 6 epochs of 137k tokens, about two minutes on one thread."""


@pytest.fixture(scope="session")
def pretrained(topics: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """``(trainer, result)`` of llm-tiny pre-trained from scratch on ``topics`` (``PRETRAINING``), in a store of
    its own; tests read it and never train it further."""
    from twinkle_core import Trainer

    trainer = Trainer("llm-tiny", hyperparams=PRETRAINING, home=str(tmp_path_factory.mktemp("pretrained")),
                      progress_bar=False, verbose=False)
    return trainer, trainer.fit(str(topics))


@pytest.fixture(scope="session")
def base_folder(pretrained: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The ``pretrained`` llm-tiny exported as a Hugging Face folder (the ``ExportResult``): the base that
    instruction and preference tuning start from; read-only."""
    trainer, _ = pretrained
    return trainer.export(format="hf", output=str(tmp_path_factory.mktemp("base") / "llm-tiny-hf"))


@pytest.fixture(scope="session")
def opposites() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A generated task with a checkable answer, the opposite of a word asked in eight phrasings
    (``twinkle_llm.samples.opposites``): 224 (prompt, answer) pairs to train on, 32 held out (each word is trained
    on in other phrasings)."""
    from twinkle_llm.samples import opposites

    return opposites()


@pytest.fixture(scope="session")
def small_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random Llama (2 layers, hidden 32) saved as Hugging Face saves it, with a tokenizer trained on
    spelled-out numbers: a base for LoRA mechanics that need no learned weights; read-only."""
    from twinkle_llm.samples import write_random_base

    return write_random_base(tmp_path_factory.mktemp("small-base"))
