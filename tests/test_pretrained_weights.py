"""Core's weights loader (``twinkle_core.pretrained``) on files written here in each format it reads: a
``.safetensors`` file, a sharded folder with its index, a Hugging Face–style folder with ``config.json``, PyTorch
files (a plain state dict, Lightning's nesting) — each gives the source module's outputs exactly; renames, a fresh
head and ignored names are reported name by name; anything beyond a new head is a mismatch naming the first
differences; a pickle that would run code, a corrupt file and an unknown format are named errors. No training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from twinkle_core.pretrained import (
    UnsafeWeightsError,
    WeightsError,
    WeightsMismatchError,
    load_weights,
    read_weights,
)


def _net(classes: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, classes))


def _same(a: nn.Module, b: nn.Module) -> float:
    x = torch.randn(5, 6)
    with torch.no_grad():
        return (a.eval()(x) - b.eval()(x)).abs().max().item()


def test_every_format_loads_into_an_equal_model(tmp_path: Path) -> None:
    """safetensors (file, sharded folder with index, HF folder with config.json) and PyTorch files (plain,
    Lightning-nested) all load to outputs equal to the source's, every tensor matched."""
    from safetensors.torch import save_file

    source = _net()
    source.train()(torch.randn(16, 6))  # BatchNorm statistics that differ from a fresh model's
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(state, str(tmp_path / "one.safetensors"))
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
    for file, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(sharded / file))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}))
    hub = tmp_path / "hub"
    hub.mkdir()
    save_file(state, str(hub / "model.safetensors"))
    (hub / "config.json").write_text(json.dumps({"architecture": "mlp", "num_classes": 4}))
    torch.save(state, tmp_path / "plain.pt")
    torch.save({"state_dict": state, "epoch": 3, "hyper_parameters": {"lr": 0.1}}, tmp_path / "lightning.ckpt")
    formats = {}
    for where in ("one.safetensors", "sharded", "hub", "plain.pt", "lightning.ckpt"):
        target = _net()
        report = load_weights(target, str(tmp_path / where))
        assert _same(source, target) == 0.0, where
        assert sorted(report.matched) == names and not (report.fresh or report.ignored or report.renamed), where
        formats[where] = report.format
    assert formats == {"one.safetensors": "safetensors", "sharded": "safetensors-sharded", "hub": "hf-folder",
                       "plain.pt": "torch", "lightning.ckpt": "torch"}
    assert read_weights(str(hub)).config == {"architecture": "mlp", "num_classes": 4}
    assert read_weights(str(tmp_path / "lightning.ckpt")).extra["epoch"] == 3


def test_renames_a_fresh_head_and_ignored_names_are_reported_and_more_is_a_mismatch(tmp_path: Path) -> None:
    """A file with another naming (renamed), a head for other classes (left fresh), an extra tensor (ignored);
    without ``fresh`` the head's shapes are a ``WeightsMismatchError`` naming them; a missing body tensor too."""
    source = _net(classes=10)
    state = {f"backbone.{k}": v for k, v in source.state_dict().items()}
    state["aux.weight"] = torch.zeros(3)
    path = tmp_path / "other-naming.pt"
    torch.save(state, path)
    target = _net(classes=4)
    report = load_weights(target, str(path), rename=lambda name: name.removeprefix("backbone."), fresh=["3"])
    assert report.fresh == ["3.weight", "3.bias"]
    assert report.renamed["0.weight"] == "backbone.0.weight" and len(report.renamed) == len(state) - 3
    assert sorted(report.ignored) == ["aux.weight", "backbone.3.bias", "backbone.3.weight"]
    assert torch.equal(target.state_dict()["0.weight"], source.state_dict()["0.weight"])
    assert "2 fresh (3.weight, 3.bias)" in report.summary()
    with pytest.raises(WeightsMismatchError, match=r"2 differences beyond a new head, first: 3\.weight: file \(10, 8\), "
                                                   r"model \(4, 8\)"):
        load_weights(_net(classes=4), str(path), rename=lambda name: name.removeprefix("backbone."))
    del state["backbone.0.bias"]
    torch.save(state, path)
    with pytest.raises(WeightsMismatchError, match=r"0\.bias: not in the file"):
        load_weights(_net(classes=4), str(path), rename=lambda name: name.removeprefix("backbone."), fresh=["3"])


class _Touch:
    """Unpickling this would create a file (``open(path, "w")``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (str(self.path), "w"))


def test_unsafe_corrupt_and_unknown_files_are_named_errors_and_nothing_runs(tmp_path: Path) -> None:
    """A pickle that would call ``open(..., "w")`` is refused by that name and the file never appears; admitting
    another class does not admit it; a truncated file and an unknown suffix are ``WeightsError``s."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save({"weight": _Touch(marker)}, evil)
    with pytest.raises(UnsafeWeightsError, match=r"it pickles io\.open\b.*nothing ran"):
        read_weights(str(evil))
    with pytest.raises(UnsafeWeightsError):
        read_weights(str(evil), allow=[nn.Linear])
    assert not marker.exists()
    good = tmp_path / "good.pt"
    torch.save(_net().state_dict(), good)
    (tmp_path / "cut.pt").write_bytes(good.read_bytes()[:100])
    with pytest.raises(WeightsError, match="cut.pt' is corrupt"):
        read_weights(str(tmp_path / "cut.pt"))
    (tmp_path / "weights.npz").write_bytes(b"x")
    with pytest.raises(WeightsError, match="unknown format; give a .safetensors file"):
        read_weights(str(tmp_path / "weights.npz"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="holds no weights"):
        read_weights(str(tmp_path / "empty"))
