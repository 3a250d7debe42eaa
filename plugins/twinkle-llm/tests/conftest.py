"""Fixtures for twinkle-llm's tests: CPython's own documentation as a text corpus (a run store per test is
twinkle-core's ``twinkle_home`` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

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
