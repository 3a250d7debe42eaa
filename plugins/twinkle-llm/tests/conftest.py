"""Fixtures for twinkle-llm's tests: CPython's own documentation as a text corpus, and llm-tiny pre-trained on it
once per session (a run store per test is twinkle-core's ``twinkle_home`` fixture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def topics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CPython's ``pydoc_data.topics`` (the help topics of the language reference, PSF licence, shipped with every
    Python): 79 documents as JSONL lines with a ``text`` field."""
    import pydoc_data.topics

    path = tmp_path_factory.mktemp("text") / "topics.jsonl"
    with path.open("w") as out:
        for name in sorted(pydoc_data.topics.topics):
            out.write(json.dumps({"text": pydoc_data.topics.topics[name]}) + "\n")
    return path


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
