"""llm-tiny split over CPU processes (gloo, in Lightning's ModelParallelStrategy) — tensor parallel on two, FSDP2
on two, pipeline stages on two (interleaved 1F1B), data × tensor, data × pipeline and tensor × pipeline parallel on
four — trains as one process does; a tensor-parallel and a two-stage run resume exactly after SIGKILL from the
shards each rank checkpointed, and checkpoints move between layouts."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.engine.checkpoints import load_checkpoint
from twinkle_core.testing import run_script

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # two training processes

SCRIPT = Path(__file__).with_name("train_layout.py")


def _train(mode: str, data: Path, out: Path, home: Path, devices: int, tensor: int | str, arg: str | None = None,
           killed: bool = False, strategy: str = "auto") -> list[dict]:
    """Run ``train_layout.py MODE`` in ``out`` (its store ``home``; ``tensor``: ``TP`` or ``TP,PP``); every rank's
    JSON (none when ``killed``)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TWINKLE_HOME": str(home),
           "TWINKLE_USER": "tester"}
    done = run_script([str(SCRIPT), mode, str(data), str(out), str(devices), str(tensor), strategy,
                       *([arg] if arg else [])], env=env, timeout=600)
    if killed:
        assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
        return []
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(devices)]


def _weights(run: str, home: Path) -> dict[str, torch.Tensor]:
    model, *_ = Trainer.from_checkpoint(run, mode="finetune", home=str(home), verbose=False).model_for_export()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


@pytest.fixture(scope="module")
def runs(topics: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Ten steps of llm-tiny on 40 help topics in one process and split over two (tp 2), each in its own store."""
    folder = tmp_path_factory.mktemp("layouts")
    data = folder / "topics-40.jsonl"
    data.write_text("".join(topics.read_text().splitlines(keepends=True)[:40]))
    one_home, split_home = folder / "one", folder / "split"
    (one,) = _train("fresh", data, folder / "out-one", one_home, 1, 1)  # the reference
    split = _train("fresh", data, folder / "out-tp2", split_home, 2, 2)
    return {"data": data, "folder": folder, "one": one, "one_home": one_home, "split": split,
            "split_home": split_home}


def test_tensor_parallel_on_two_processes_trains_as_one_process_does_and_its_checkpoints_change_layout(
        runs: dict) -> None:
    """tp 2 (sequence-parallel norms, vocabulary-split embedding and head, loss parallel, tied weights kept tied):
    the first ten losses equal one process's within 1e-4 relative (fp32, the same seed and batches) and the final
    weights — gathered into one checkpoint — within Adam's rounding; the plan records dp 1 × tp 2. Each run's
    checkpoint then continues in another layout: the tp-2 run in one process and in two pipeline stages, the
    one-process run split over two."""
    one, split, one_home, split_home = runs["one"], runs["split"], runs["one_home"], runs["split_home"]
    assert split[0]["strategy"] == "fsdp2" and split[0]["layout"]["layout"].startswith("dp 1 × tp 2 × pp 1")
    assert len(one["losses"]) == 10
    assert split[0]["split_logits"] and not one["split_logits"]  # loss parallel: no rank held the whole logits
    for rank in split:  # both ranks of the tensor-parallel pair saw the same batches, so the same losses
        assert rank["losses"] == pytest.approx(one["losses"], rel=1e-4)
    assert one["losses"][-1] < one["losses"][0]
    plan = json.loads((split_home / "runs" / "tester" / "fresh" / "run1" / "plan.json").read_text())
    assert plan["strategy"] == "fsdp2" and plan["estimates"]["layout"]["tensor"] == 2

    single, shared = _weights(one["run_uri"], one_home), _weights(split[0]["run_uri"], split_home)
    assert single.keys() == shared.keys()
    for name in single:  # Adam normalises each update, so last-bit gradient differences move a weight by ~1e-5
        torch.testing.assert_close(shared[name], single[name], rtol=0, atol=5e-4, msg=name)

    onward = Trainer.from_checkpoint(split[0]["run_uri"], home=str(split_home), verbose=False, progress_bar=False,
                                     hyperparams={"devices": 1, "tensor_parallel_size": 1, "max_steps": 14}).fit()
    assert onward.status == "finished" and onward.plan.strategy != "fsdp2"
    assert onward.metrics["train_loss"] < one["losses"][4]  # it starts from the trained weights, not afresh
    (again, _) = _train("continue", runs["data"], runs["folder"] / "out-onward", one_home, 2, 2, one["run_uri"])
    assert again["status"] == "finished" and again["layout"]["tensor"] == 2
    assert again["losses"][0] < one["losses"][4]  # the one-process weights and Adam state, split over two
    (staged, _) = _train("continue", runs["data"], runs["folder"] / "out-staged", split_home, 2, "1,2",
                         split[0]["run_uri"])
    assert staged["status"] == "finished" and staged["layout"]["pipeline"] == 2
    assert staged["losses"][0] < one["losses"][4]  # the tp-2 weights and Adam state, cut into two stages


@pytest.mark.parametrize("layout", [2, "1,2"], ids=["tp2", "pp2"])
def test_a_split_run_killed_mid_epoch_resumes_to_the_same_weights(runs: dict, layout: int | str) -> None:
    """tp 2, and two pipeline stages, SIGKILLed (both ranks) before step 6 — after the step-4 checkpoint, a folder
    of each rank's shards, mid-epoch — and resumed on two processes end with weights and Adam moments bit-identical
    to the uninterrupted run's (the two-stage reference: ten steps of its own); the two stages' checkpoint then
    continues in one process."""
    if layout == 2:
        home, uninterrupted = runs["split_home"], runs["split"][0]
    else:
        home = runs["folder"] / "home-pp2"
        uninterrupted = _train("fresh", runs["data"], runs["folder"] / "out-pp2", home, 2, layout)[0]
    _train("kill", runs["data"], runs["folder"] / f"out-kill-{layout}", home, 2, layout, "6", killed=True)
    store = RunStore(str(home))
    (victim,) = store.list(project="kill")
    assert victim.status == "running"  # nothing could mark it
    resumed = _train("resume", runs["data"], runs["folder"] / f"out-resume-{layout}", home, 2, layout, victim.uri)
    assert resumed[0]["losses"] == resumed[1]["losses"] and len(resumed[0]["losses"]) == 6  # from the checkpoint
    assert resumed[0]["losses"] == uninterrupted["losses"][4:]  # at step 4: the same batches, the same losses
    folder = Path(resumed[0]["last_checkpoint"])  # each rank wrote its own shard
    assert sorted(p.name for p in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    reference = load_checkpoint(uninterrupted["last_checkpoint"])  # the sharded folders, read whole
    again = load_checkpoint(str(folder))
    assert reference["global_step"] == again["global_step"] == 10
    for key, value in reference["state_dict"].items():
        assert torch.equal(value, again["state_dict"][key]), key
    for saved, restored in zip(reference["optimizer_states"][0]["state"].values(),
                               again["optimizer_states"][0]["state"].values()):
        assert all(torch.equal(saved[k], restored[k]) for k in ("exp_avg", "exp_avg_sq"))
    if layout != 2:  # the two stages' shards continue in one process
        onward = Trainer.from_checkpoint(resumed[0]["run_uri"], home=str(home), verbose=False, progress_bar=False,
                                         hyperparams={"devices": 1, "pipeline_parallel_size": 1, "max_steps": 4}).fit()
        assert onward.status == "finished" and onward.plan.pipeline_parallel_size == 1
        assert onward.metrics["train_loss"] < uninterrupted["losses"][4]  # from the trained weights, not afresh


@pytest.mark.parametrize(("devices", "tensor", "strategy", "layout"), [(2, 1, "fsdp2", "dp 2 × tp 1 × pp 1"),
                                                                       (2, "1,2,2", "auto", "dp 1 × tp 1 × pp 2"),
                                                                       (4, 2, "auto", "dp 2 × tp 2 × pp 1"),
                                                                       (4, "1,2", "auto", "dp 2 × tp 1 × pp 2"),
                                                                       (4, "2,2", "auto", "dp 1 × tp 2 × pp 2")])
def test_sharded_pipelined_and_two_dimensional_layouts_train_as_one_process_does(
        runs: dict, devices: int, tensor: int | str, strategy: str, layout: str) -> None:
    """FSDP2 over two replicas; two pipeline stages (four runs of decoder layers, two per process: interleaved
    1F1B, the embedding tied to the head across the first and last stage; each step accumulating two batches of
    two windows, whose micro-batch losses are scaled as Lightning scales an accumulated loss); two replicas of a
    tensor-parallel pair (FSDP2 × TP on a 2 × 2 mesh), each replica reading half of every batch; two replicas of a
    two-stage pipeline (FSDP2 × stages: the embedding, sharded on the first stage, stays tied to the head, sharded on
    the last); and a tensor-parallel pair in each of two pipeline stages: the first ten whole-batch losses equal one
    process's within 1e-4 relative, and the final weights (gathered into one checkpoint) match within Adam's
    rounding."""
    home = runs["folder"] / f"home-{devices}-{tensor}"
    ranks = _train("fresh", runs["data"], runs["folder"] / f"out-{devices}-{tensor}", home, devices, tensor,
                   strategy=strategy)
    assert ranks[0]["strategy"] == "fsdp2" and ranks[0]["layout"]["layout"].startswith(layout)
    one, one_home = runs["one"], runs["one_home"]
    if str(tensor).count(",") == 2:  # accumulating: one process accumulating as many batches is the reference
        one_home = runs["folder"] / "home-one-accumulating"
        (one,) = _train("fresh", runs["data"], runs["folder"] / "out-one-accumulating", one_home, 1,
                        "1,1," + str(tensor).rsplit(",", 1)[1])
    for rank in ranks:
        assert rank["losses"] == pytest.approx(one["losses"], rel=1e-4)
    single, shared = _weights(one["run_uri"], one_home), _weights(ranks[0]["run_uri"], home)
    assert single.keys() == shared.keys()
    for name in single:
        torch.testing.assert_close(shared[name], single[name], rtol=0, atol=5e-4, msg=name)
