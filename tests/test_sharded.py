"""Data larger than the memory a run may use is streamed in shards: the plan says so, each rank reads only its
own shards, every training sample is seen exactly once per epoch across the ranks, and exact resume holds."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from twinkle_core import RunStore

SCRIPT = textwrap.dedent(
    '''
    import json, os, signal, sys
    import lightning as L
    from twinkle_core import Trainer

    class Seen(L.Callback):
        """Record the row ids (feature 'id') of every training sample, per epoch."""
        def __init__(self, kill_at=None):
            self.ids, self.kill_at = {}, kill_at
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if self.kill_at is not None and trainer.global_step == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            self.ids.setdefault(trainer.current_epoch, []).extend(int(v) for v in batch[0][:, 0].tolist())

    mode, data, devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
    hp = {"devices": devices, "accelerator": "cpu", "batch_size": 32, "max_epochs": 3, "shard_rows": 32,
          "memory_limit_bytes": 300_000, "checkpoint_every_n_steps": 4, "progress_bar": False}
    seen = Seen(int(sys.argv[4]) if mode == "kill" else None)
    if mode == "resume":
        result = Trainer.from_checkpoint(sys.argv[4], mode="resume", verbose=False, callbacks=[seen]).fit()
    else:
        result = Trainer("tabular-mlp", hyperparams=hp, project=mode, verbose=False, callbacks=[seen]).fit(data)
    decisions = {d.name: [d.value, d.reason] for d in result.plan.decisions}
    rank = int(os.environ.get("LOCAL_RANK", 0))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{mode}-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "ids": seen.ids, "run": result.run_uri, "last": result.last_checkpoint,
                   "plan": decisions, "best": result.best_metric}, f)  # a file per rank
    '''
)


def _table(path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 640
    label = np.repeat([0, 1], n // 2)
    features = rng.normal(size=(n, 19)) + label[:, None] * 0.8
    frame = pd.DataFrame(features, columns=[f"f{i}" for i in range(19)])
    frame.insert(0, "id", np.arange(n))
    frame["label"] = label
    frame.to_csv(path, index=False, float_format="%.15f")
    return path




@pytest.mark.processes
def test_two_ranks_stream_their_own_shards_and_see_each_sample_once(run_job, twinkle_home, tmp_path) -> None:
    data = _table(tmp_path / "wide.csv")
    assert os.path.getsize(data) > 150_000  # more than half the 300 kB the run may use
    script = tmp_path / "sharded.py"
    script.write_text(SCRIPT)
    ranks = run_job(script, "ddp", str(data), "2")
    assert sorted(ranks) == [0, 1]
    value, reason = ranks[0]["plan"]["data_loading"]
    assert value == "sharded" and "the memory limit" in reason and "shards" in reason, ranks[0]["plan"]
    assert ranks[0]["plan"]["num_workers"][0] == 1, ranks[0]["plan"]  # a loader worker reads ahead
    (run,) = RunStore().list(project="ddp")
    train_ids = set(range(640)) - set(_val_ids(run))
    assert len(train_ids) == 512
    orders = []
    for epoch in ("0", "1", "2"):
        mine, theirs = ranks[0]["ids"][epoch], ranks[1]["ids"][epoch]
        assert len(mine) == len(theirs) == 256, (epoch, len(mine), len(theirs))  # the same steps on both ranks
        assert sorted(mine + theirs) == sorted(train_ids), (epoch, sorted(set(train_ids) ^ set(mine + theirs))[:20])
        orders.append(mine)
    assert orders[0] != orders[1]  # reshuffled every epoch
    assert ranks[0]["best"] > 0.8, ranks[0]["best"]


def _val_ids(run) -> list[int]:
    spec = json.loads(Path(RunStore().path(run.id, "data.json")).read_text())
    assert spec["sharded"] and spec["shards"] == 16
    from twinkle_core.data.processor import split_indices

    labels = np.repeat([0, 1], 320)
    return split_indices(640, 0.2, 0, labels)[1].tolist()


def test_a_killed_sharded_run_resumes_exactly(run_job, twinkle_home, tmp_path) -> None:
    data = _table(tmp_path / "wide.csv")
    script = tmp_path / "sharded.py"
    script.write_text(SCRIPT)
    full = run_job(script, "full", str(data), "1")[0]
    # 512 rows / 32 = 16 steps per epoch; last.ckpt every 4 steps; killed at step 22 (epoch 1, mid-shard)
    killed = run_job.raw(script, "kill", str(data), "1", "22")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (victim,) = RunStore().list(project="kill")
    resumed = run_job(script, "resume", str(data), "1", victim.uri)[0]
    a = torch.load(full["last"], weights_only=True)
    b = torch.load(resumed["last"], weights_only=True)
    assert a["global_step"] == b["global_step"] == 48
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    # the resumed run saw exactly the rest of epoch 1 (from step 20) and all of epoch 2
    assert resumed["ids"]["1"] == full["ids"]["1"][(20 - 16) * 32:] and resumed["ids"]["2"] == full["ids"]["2"]
