"""One fit on two CPU processes (DDP over gloo) is one run: one catalogue row, one set of checkpoints, metrics
over the whole validation set, the same result on every rank, and exact resume after a SIGKILL of the job.

Lightning launches the second process by running the script again, so each case runs a small script.
"""

from __future__ import annotations

import os
import signal
import textwrap

from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore
from twinkle_core.engine.checkpoints import load_checkpoint

SCRIPT = textwrap.dedent(
    '''
    import json, os, signal, sys
    import lightning as L
    import torch
    from twinkle_core import Trainer

    class KillJobAt(L.Callback):
        """SIGKILL every process of the job when the given optimizer step is about to start."""
        def __init__(self, step):
            self.step = step
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == self.step:
                trainer.strategy.barrier()
                if trainer.is_global_zero:
                    os.killpg(os.getpgid(0), signal.SIGKILL)
                else:
                    signal.pause()

    mode, data = sys.argv[1], sys.argv[2]
    hp = {"devices": 2, "accelerator": "cpu", "batch_size": 16, "max_epochs": 2, "checkpoint_every_n_steps": 4,
          "dropout": 0.3, "progress_bar": False}
    if mode == "resume":
        trainer = Trainer.from_checkpoint(sys.argv[3], mode="resume", verbose=False)
        result = trainer.fit()
    else:
        callbacks = [KillJobAt(int(sys.argv[3]))] if mode == "kill" else []
        trainer = Trainer("tabular-mlp", hyperparams=hp, project=mode, verbose=False, callbacks=callbacks)
        if mode == "stop":  # decided once, on rank 0, after the first epoch; every rank must stop with it
            trainer.monitor(alert_rules={"accuracy": {"rule": "> 0.5", "action": "stop"}})
        result = trainer.fit(data)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    out = {"rank": rank, "result": {k: v for k, v in result.to_dict().items() if k != "plan"},
           "strategy": result.plan.strategy, "devices": result.plan.devices}
    if rank == 0 and mode == "full":  # the best checkpoint scored by one process on every validation row
        model, prepared, _, _ = trainer.model_for_export()
        model.eval()
        x = torch.stack([prepared.val[i][0] for i in range(len(prepared.val))])
        y = torch.stack([prepared.val[i][1] for i in range(len(prepared.val))])
        with torch.no_grad():
            out["val_rows"] = len(y)
            out["accuracy"] = float((model(x).argmax(-1) == y).float().mean())
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{mode}-rank{out['rank']}.json"), "w") as f:
        json.dump(out, f)  # a file per rank: the ranks' stdout lines would interleave
    '''
)




@pytest.mark.processes
def test_two_processes_make_one_run_and_resume_exactly(run_job, twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    full = run_job(script, "full", str(cancer_csv))
    assert sorted(full) == [0, 1]  # both ranks finished ...
    assert full[0]["result"] == full[1]["result"]  # ... with the same result
    assert full[0]["strategy"] == "ddp" and full[0]["devices"] == 2
    store = RunStore()
    (run,) = store.list(project="full")  # one run for the job
    assert run.status == "finished" and run.uri == full[0]["result"]["run_uri"]
    assert sorted(os.listdir(store.path(run.id, "checkpoints"))) == ["best.ckpt", "last.ckpt"]
    # the monitored metric is over every validation row (113: odd, so an unpadded split is needed)
    assert full[0]["val_rows"] == 113
    assert abs(full[0]["result"]["best_metric"] - full[0]["accuracy"]) < 1e-6
    assert full[0]["result"]["best_metric"] > 0.9

    # 455 rows over 2 ranks × 16 = 15 steps per epoch; last.ckpt every 4 steps; the job dies before step 22
    killed = run_job.raw(script, "kill", str(cancer_csv), "22")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (victim,) = store.list(project="kill")
    assert victim.status == "running"
    partial = torch.load(store.path(victim.id, "checkpoints", "last.ckpt"), weights_only=True)
    assert partial["global_step"] == 20 and len(partial["twinkle_rng"]["ranks"]) == 2
    resumed = run_job(script, "resume", str(cancer_csv), victim.uri)
    assert resumed[0]["result"] == resumed[1]["result"]
    a = torch.load(full[0]["result"]["last_checkpoint"], weights_only=True)
    b = torch.load(resumed[0]["result"]["last_checkpoint"], weights_only=True)
    assert a["global_step"] == b["global_step"] == 30
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    assert len(store.list(project="kill")) == 2  # the victim and its one resumed run
    assert store.get(victim.uri).status == "interrupted"


@pytest.mark.processes
def test_an_alert_rule_stops_every_rank_at_the_same_step(run_job, twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    ranks = run_job(script, "stop", str(cancer_csv))
    assert sorted(ranks) == [0, 1] and ranks[0]["result"] == ranks[1]["result"]
    assert ranks[0]["result"]["status"] == "stopped" and "val_accuracy" in ranks[0]["result"]["stop_reason"]
    (run,) = RunStore().list(project="stop")
    assert run.status == "stopped" and len(run.alerts) == 1  # one alert for the job, not one per rank
    assert torch.load(ranks[0]["result"]["last_checkpoint"], weights_only=True)["global_step"] == 15


FSDP_SCRIPT = textwrap.dedent(
    '''
    import json, os, sys
    import lightning as L
    from twinkle_core import Trainer

    class Shards(L.Callback):
        """Record how each rank holds the first layer's weight while training."""
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            weight = module.model[1].weight
            self.seen = (type(weight).__name__, list(weight.to_local().shape) if hasattr(weight, "to_local") else None,
                         list(weight.shape))

    mode, data = sys.argv[1], sys.argv[2]
    if mode == "fsdp2":
        shards = Shards()
        hp = {"devices": 2, "accelerator": "cpu", "strategy": "fsdp2", "batch_size": 32, "max_epochs": 3,
              "progress_bar": False}
        result = Trainer("tabular-mlp", hyperparams=hp, project="fsdp", verbose=False, callbacks=[shards]).fit(data)
        seen = shards.seen
    else:
        result = Trainer.from_checkpoint(sys.argv[3], mode="continue", verbose=False,
                                         hyperparams={"devices": 1, "strategy": "auto", "max_epochs": 2}).fit()
        seen = None
    out = {"rank": int(os.environ.get("LOCAL_RANK", 0)), "result": {k: v for k, v in result.to_dict().items() if k != "plan"},
           "strategy": result.plan.strategy, "seen": seen}
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{mode}-rank{out['rank']}.json"), "w") as f:
        json.dump(out, f)  # a file per rank: the ranks' stdout lines would interleave
    '''
)


@pytest.mark.processes
def test_fsdp2_shards_on_two_cpu_processes_and_continues_in_one(run_job, twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "train_fsdp.py"
    script.write_text(FSDP_SCRIPT)
    sharded = run_job(script, "fsdp2", str(cancer_csv))
    assert sorted(sharded) == [0, 1] and sharded[0]["result"] == sharded[1]["result"]
    assert sharded[0]["strategy"] == "fsdp2"
    for rank in (0, 1):  # each rank holds half of the 64 × 30 weight
        assert sharded[rank]["seen"] == ["DTensor", [32, 30], [64, 30]]
    assert sharded[0]["result"]["best_metric"] > 0.85
    (run,) = RunStore().list(project="fsdp")
    folder = Path(sharded[0]["result"]["last_checkpoint"])  # each rank wrote its own shard, none the whole model
    assert folder.is_dir() and sorted(p.name for p in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    full = load_checkpoint(str(folder))  # read whole in this process
    assert full["state_dict"]["model.1.weight"].shape == (64, 30)
    states = full["optimizer_states"][0]["state"]  # Adam's moments keyed by parameter order, as one process keys them
    assert sorted(states) == list(range(len(states))) and any(s["exp_avg"].shape == (64, 30) for s in states.values())
    one = run_job(script, "continue", str(cancer_csv), run.uri)
    assert sorted(one) == [0] and one[0]["strategy"] == "auto"
    assert one[0]["result"]["parent"] == run.uri and one[0]["result"]["status"] == "finished"
    assert one[0]["result"]["best_metric"] > 0.85


def test_a_run_sharded_in_this_process_exports_a_whole_model(twinkle_home, cancer_csv) -> None:
    """FSDP2 in this very process (one device: Lightning's ModelParallelStrategy on a mesh of one) leaves the
    trained algorithm's parameters split (DTensors), which cannot be deep-copied: export then builds a whole model
    for the best checkpoint's weights, and it matches; the process's rendezvous variables are as before."""
    from twinkle_core import Trainer

    rendezvous = {name: os.environ.get(name) for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")}
    trainer = Trainer("tabular-mlp", hyperparams={"strategy": "fsdp2", "devices": 1, "max_epochs": 2},
                      progress_bar=False, verbose=False)
    result = trainer.fit(str(cancer_csv))
    assert result.status == "finished" and result.plan.strategy == "fsdp2"
    # Lightning set the rendezvous variables for its process group; a later fit in this process must not find
    # them (it would take them for a launcher's and skip the check that several nodes were started together)
    assert {name: os.environ.get(name) for name in rendezvous} == rendezvous
    exported = trainer.export(format="onnx")
    assert exported.max_abs_diff < 1e-4 and exported.metric_delta == 0.0
