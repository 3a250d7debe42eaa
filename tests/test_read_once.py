"""A fit reads its data once (parsed and fingerprinted from one read), and a tune prepares it once for all
trials — counted through a wrapping fsspec filesystem."""

from __future__ import annotations

import collections

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from twinkle_core import RunStore, Trainer

OPENS: collections.Counter[str] = collections.Counter()


class CountingFileSystem(LocalFileSystem):
    """The local disk under the protocol ``counted://``, counting every open per path."""

    protocol = ("counted",)

    def _open(self, path, mode="rb", *args, **kwargs):
        OPENS[self._strip_protocol(path)] += 1
        return super()._open(path, mode, *args, **kwargs)


@pytest.fixture
def counted(cancer_csv):
    fsspec.register_implementation("counted", CountingFileSystem, clobber=True)
    OPENS.clear()
    yield f"counted://{cancer_csv}", str(cancer_csv)


def test_a_fit_reads_its_data_once(twinkle_home, counted) -> None:
    uri, path = counted
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False).fit(uri)
    assert result.status == "finished"
    assert OPENS[path] == 1, OPENS
    # and the manifest of what it trained on was stored from that one read
    from twinkle_core.ops.verify import load_manifest

    assert load_manifest(result.data_fingerprint.removeprefix("md5:"), RunStore().home) is not None


def test_a_five_trial_tune_prepares_the_data_once(twinkle_home, counted) -> None:
    uri, path = counted
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False)
    best = trainer.tune(params_space={"lr": (1e-4, 1e-2)}, max_trials=5, data=uri, pruning=False)
    assert best.completed == 5
    assert OPENS[path] == 1, OPENS
    best.trainer.fit(uri)  # the tuned trainer reads the data afresh
    assert OPENS[path] == 2
