"""Sharded checkpoint folders (``engine.sharded``: DCP shards + ``meta.pt``) read back whole in one process, with
optimizer states keyed as one process keys them — and never by running code a folder carries."""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn

from twinkle_core.engine.checkpoints import (SHARDS_KEY, SHARDS_META, CheckpointError, UnsafeCheckpointError,
                                             is_sharded, load_checkpoint)


class Payload:
    """Unpickling this would run code."""

    def __reduce__(self):
        return (print, ("pwned",))


def _write_folder(folder: Path, extra: dict | None = None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A two-layer network after one Adam step, written in the sharded format by one process (the shapes a
    ``ShardedModelParallelStrategy`` writes: tensors by name through DCP, the rest in ``meta.pt``)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    names = [name for name, _ in model.named_parameters()]
    saved = optimizer.state_dict()
    tensors = {"state_dict": dict(model.state_dict()),
               "optimizer_0": {"state": {names[i]: values for i, values in saved["state"].items()}}, **(extra or {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
        dcp.save(tensors, checkpoint_id=str(folder), no_dist=True)
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[i] for i in g["params"]]}
              for g in saved["param_groups"]]
    meta = {"global_step": 1, "twinkle": {"algorithm": "x"}, SHARDS_KEY: {"optimizers": [{"param_groups": groups,
                                                                                           "plain": {}}]}}
    torch.save(meta, folder / SHARDS_META)
    return model, optimizer


def test_a_sharded_folder_reads_back_as_the_checkpoint_one_process_writes(tmp_path: Path) -> None:
    """The folder reads whole: every weight equal, the loops' values kept, and the optimizer state keyed by
    parameter order, so a plain ``Optimizer.load_state_dict`` of a fresh Adam restores the moments exactly."""
    folder = tmp_path / "last.ckpt"
    model, optimizer = _write_folder(folder)
    assert is_sharded(str(folder))
    checkpoint = load_checkpoint(str(folder))
    assert checkpoint["global_step"] == 1 and checkpoint["twinkle"] == {"algorithm": "x"}
    assert SHARDS_KEY not in checkpoint
    for name, value in model.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][name], value), name
    fresh = torch.optim.Adam(model.parameters(), lr=0.5)
    fresh.load_state_dict(checkpoint["optimizer_states"][0])
    for before, after in zip(optimizer.state_dict()["state"].values(), fresh.state_dict()["state"].values()):
        assert all(torch.equal(before[k], after[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert fresh.param_groups[0]["lr"] == 0.01  # the saved settings


def test_a_sharded_folder_whose_index_would_run_code_is_refused_and_nothing_runs(tmp_path: Path, capsys) -> None:
    """DCP's index is a pickle: one naming anything but DCP's records is refused by name before it is loaded."""
    folder = tmp_path / "evil.ckpt"
    _write_folder(folder)
    (folder / ".metadata").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(UnsafeCheckpointError, match="would run code when loaded"):
        load_checkpoint(str(folder))
    assert "pwned" not in capsys.readouterr().out


def test_a_pickled_item_in_a_sharded_folder_is_never_unpickled(tmp_path: Path, capsys) -> None:
    """DCP stores a non-tensor value as pickled bytes it would load with ``weights_only=False``; Twinkle reads
    only the tensors, so such an item never runs."""
    folder = tmp_path / "odd.ckpt"
    model, _ = _write_folder(folder, extra={"callbacks": {"evil": Payload()}})
    checkpoint = load_checkpoint(str(folder))
    assert torch.equal(checkpoint["state_dict"]["0.weight"], model.state_dict()["0.weight"])
    assert "pwned" not in capsys.readouterr().out


def test_an_unfinished_sharded_folder_is_named(tmp_path: Path) -> None:
    """A folder whose save never finished (no ``meta.pt``: rank 0 writes it last) is a named error."""
    folder = tmp_path / "last.ckpt"
    _write_folder(folder)
    (folder / SHARDS_META).unlink()
    with pytest.raises(CheckpointError, match="did not finish"):
        load_checkpoint(str(folder))
    buffer = io.BytesIO()
    torch.save({"x": torch.ones(1)}, buffer)
    (folder / ".metadata").write_bytes(buffer.getvalue()[:10])  # and a truncated index is not a crash
    (folder / SHARDS_META).write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError):
        load_checkpoint(str(folder))
