"""Gradient compression for DDP (torch communication hooks): 2-process runs with PowerSGD and bf16 reach the
uncompressed run's accuracy within a point while all-reducing fewer bytes (counted in the hook); the planner
turns PowerSGD on across nodes; 1-bit Adam is a named error pointing at what replaced it."""

from __future__ import annotations

import textwrap

import pytest

from twinkle_core import Trainer
from twinkle_core.errors import HyperparameterError
from twinkle_core.planning import DefaultStrategy, Hardware, ModelFacts, PlanContext, PlanningError

SCRIPT = textwrap.dedent(
    '''
    import json, os, sys
    from twinkle_core import RunStore, Trainer

    kind, data = sys.argv[1], sys.argv[2]
    hp = {"devices": 2, "accelerator": "cpu", "batch_size": 16, "max_epochs": 5, "progress_bar": False,
          "gradient_compression": kind, "seed": 1}
    result = Trainer("tabular-mlp", hyperparams=hp, project=kind, verbose=False).fit(data)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    out = {"rank": rank, "accuracy": result.best_metric, "compression": result.plan.gradient_compression}
    if rank == 0:
        out["measured"] = RunStore().get(result.run_uri).measured
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{kind}-rank{rank}.json"), "w") as f:
        json.dump(out, f)
    '''
)


@pytest.mark.processes
def test_compressed_ddp_keeps_accuracy_and_sends_fewer_bytes(run_job, twinkle_home, cancer_csv, tmp_path) -> None:
    script = tmp_path / "compress.py"
    script.write_text(SCRIPT)
    runs = {kind: run_job(script, kind, str(cancer_csv))[0] for kind in ("none", "powersgd", "bf16")}
    plain = runs["none"]
    assert plain["measured"]["gradient_compression"] == "none"
    for kind in ("powersgd", "bf16"):
        assert runs[kind]["compression"] == kind and abs(runs[kind]["accuracy"] - plain["accuracy"]) <= 0.01
        assert runs[kind]["measured"]["allreduce_bytes_per_step"] < plain["measured"]["allreduce_bytes_per_step"]
    assert runs["bf16"]["measured"]["allreduce_bytes_per_step"] == pytest.approx(
        plain["measured"]["allreduce_bytes_per_step"] / 2)


def _context(hardware: Hardware, **overrides) -> PlanContext:
    facts = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**7,
                       activation_bytes_per_sample=10**4, state_bytes=16 * 10**6)
    return PlanContext("tabular-mlp", "tabular_classification", facts, 10**6, 1000, 32, None, 5, hardware,
                       overrides=overrides)


def test_the_planner_compresses_across_nodes_only() -> None:
    node = Hardware("cpu", 1, "cpu", 8 * 10**9, False, False, 4, 8 * 10**9)
    two_nodes = Hardware("cpu", 1, "cpu", 8 * 10**9, False, False, 4, 8 * 10**9, nodes=2, launcher="torchrun",
                         processes_per_node=1)
    across = DefaultStrategy().plan(_context(two_nodes))
    assert (across.strategy, across.gradient_compression) == ("ddp", "powersgd")
    reason = next(d.reason for d in across.decisions if d.name == "gradient_compression")
    assert "across 2 nodes" in reason
    assert DefaultStrategy().plan(_context(node)).gradient_compression == "none"
    with pytest.raises(PlanningError, match="compresses DDP's all-reduce, but the plan's strategy is 'auto'"):
        DefaultStrategy().plan(_context(node, gradient_compression="bf16"))
    with pytest.raises(PlanningError, match="devices=2 was asked for, but torchrun started 1"):
        DefaultStrategy().plan(_context(two_nodes, devices=2))


def test_one_bit_adam_is_a_named_error_with_the_replacement() -> None:
    with pytest.raises(HyperparameterError, match="DeepSpeed removed 1-bit Adam.*'powersgd'"):
        Trainer("tabular-mlp", hyperparams={"gradient_compression": "1bit-adam"}, verbose=False)
