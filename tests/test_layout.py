"""Plans for models that do not fit one device: a 12-billion-parameter transformer measured on the meta device
(nothing allocated) gets a data × tensor × pipeline layout whose memory matches hand arithmetic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from twinkle_core.planning import (
    DefaultStrategy,
    Hardware,
    ModelFacts,
    ParallelDims,
    Plan,
    PlanContext,
    PlanningError,
    measure,
    plan_layout,
)
from twinkle_core.engine.strategies import lightning_strategy

GB = 10**9


class GPT(nn.Module):
    """A decoder-only transformer of the GPT-3 13B shape (40 layers, width 5120)."""

    def __init__(self, vocab: int = 50304, width: int = 5120, layers: int = 40, heads: int = 40) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                                               norm_first=True) for _ in range(layers))
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        for block in self.blocks:
            hidden = block(hidden)
        return self.head(hidden)


def test_a_12b_model_is_laid_out_from_memory_arithmetic_without_allocating() -> None:
    """A 13B transformer measured on the meta device (its row-wise modules named as a Megatron-style plan splits
    them) gets the fastest of the layouts that fit — dp 8 × tp 2 on two 8-GPU nodes — and the plan's memory and
    step time are the module docstrings' arithmetic, reproduced by hand here."""
    with torch.device("meta"):
        model, ids = GPT(), torch.randint(0, 50304, (2, 2048))
    row_wise = [m for block in model.blocks for m in (block.self_attn, block.linear2)]  # attention ends in out_proj
    facts = measure(model, ids, row_wise, shard_units=len(model.blocks))
    assert all(p.is_meta for p in model.parameters())  # nothing was allocated
    assert 12.5e9 < facts.parameters < 13.5e9
    width_bytes = 2048 * 5120 * 4  # one fp32 activation of a sample between layers
    assert facts.boundary_bytes_per_sample == width_bytes and facts.tensor_parallel_collectives == 2 * 80
    assert facts.tensor_parallel_bytes_per_sample == 2 * 80 * width_bytes  # each reduced forward and backward
    cluster = Hardware.cluster(devices=8, device_memory="80GB", nodes=2, interconnect="nvlink+infiniband")
    plan = DefaultStrategy().plan(PlanContext("gpt-13b", "language_modeling", facts, 10**12, 10**7, 1, 512, 1,
                                              cluster, splits_tensors=True))  # as if it supplied a tensor plan
    layout = plan.estimates["layout"]
    assert (layout["data"], layout["tensor"], layout["pipeline"]) == (8, 2, 1)
    p, act, micro = facts.parameters, facts.activation_bytes_per_sample, layout["micro_batch_size"]
    # by hand: fp32 weights, gradients and AdamW moments sharded over all 16; two of 40 units gathered in bf16;
    # bf16 activations of the micro-batch split by tp — the largest micro-batch of a replica's 64 that fits
    assert layout["memory"]["state"] == int(16 * p / 2 / 8) and layout["memory"]["gathered"] == int(2 / 40 * p / 2 * 2)
    assert layout["memory"]["activations"] == int(act * 0.5 * micro / 2) and micro == 8
    assert layout["memory"]["total"] <= 64 * GB < layout["memory"]["total"] + int(act * 0.5 * micro / 2)
    assert plan.micro_batch_size == 8 and plan.accumulate_grad_batches == 8  # 8 × 8 replicas × 8 = 512
    # the planner's estimate (arithmetic on the measured facts), not a measured duration
    compute = facts.flops_per_sample * 512 / (16 * 989e12 * 0.4)
    tensor = 8 * (160 * (1e-5 + 5e-5) + 2 * (1 / 2) * facts.tensor_parallel_bytes_per_sample * 0.5 * 8 / 3.6e11)
    assert layout["seconds"]["compute"] == pytest.approx(compute, rel=1e-5)
    assert layout["seconds"]["tensor"] == pytest.approx(tensor, rel=1e-5)
    assert layout["seconds"]["data"] == 0.0  # FSDP2's traffic over NVLink hides behind the compute
    assert layout["step_seconds"] == pytest.approx(compute + tensor, rel=1e-5)
    assert all(seconds > layout["step_seconds"] for seconds in layout["alternatives"].values())
    assert "dp 16 × tp 1 × pp 1" in layout["alternatives"]  # fits, but its traffic crosses InfiniBand exposed
    text = plan.explain()
    assert "dp 8 × tp 2 × pp 1 (FSDP2)" in text and "tensor parallel stays inside a node" in text
    assert "fastest of 4 layouts that fit" in text


def test_few_devices_per_node_need_pipeline_stages() -> None:
    """With one GPU per node a 13B model's state needs four devices, and FSDP2 over Ethernet does not fit with
    its gathered units; four pipeline stages do, each with a quarter of the state, at the bubble of a batch of
    one (two stages per device, interleaved)."""
    facts = ModelFacts(parameters=13 * 10**9, trainable=13 * 10**9, flops_per_sample=10**14,
                       activation_bytes_per_sample=22 * GB, state_bytes=16 * 13 * 10**9)
    one_gpu_nodes = Hardware.cluster(devices=1, device_memory="80GB", nodes=4)
    layout = plan_layout(facts, one_gpu_nodes, global_batch=64)
    assert layout is not None and (layout.data, layout.tensor, layout.pipeline) == (1, 1, 4)
    assert layout.micro_batch_size == 1 and layout.bubble == round(3 / (2 * 1 + 3), 4)
    assert layout.memory["total"] == int(16 * 13e9 / 4) + int(22 * GB * 0.5)
    assert plan_layout(facts, Hardware.cluster(devices=1, device_memory="24GB", nodes=2), global_batch=64) is None


def test_a_model_that_fits_gets_no_layout() -> None:
    facts = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**7, activation_bytes_per_sample=10**4,
                       state_bytes=16 * 10**6)
    plan = DefaultStrategy().plan(PlanContext("mlp", "tabular_classification", facts, 10**6, 1000, 32, None, 5,
                                              Hardware.cluster(devices=8, device_memory="80GB")))
    assert "layout" not in plan.estimates and all(d.name != "layout" for d in plan.decisions)


FACTS_13B = ModelFacts(parameters=13 * 10**9, trainable=13 * 10**9, flops_per_sample=10**14,
                       activation_bytes_per_sample=8 * GB, state_bytes=16 * 13 * 10**9,
                       tensor_parallel_bytes_per_sample=6 * GB, tensor_parallel_collectives=160,
                       boundary_bytes_per_sample=40 * 10**6, shard_units=40)
"""A 13B transformer with its tensor-parallel traffic measured (as ``measure`` reads an algorithm's plan)."""


def test_a_model_without_a_tensor_parallel_plan_gets_no_tensor_factor_and_the_plan_says_why() -> None:
    """A 13B model whose algorithm supplies no tensor-parallel plan (and cuts no stages) is laid out as FSDP2 over
    all 16 devices, and the reason names the missing hook; with a plan it gets a tensor factor, the engine's
    strategy and a batch per tensor-parallel group."""
    cluster = Hardware.cluster(devices=8, device_memory="80GB", nodes=2, interconnect="nvlink+infiniband")
    plan = DefaultStrategy().plan(PlanContext("resnet-13b", "image_classification", FACTS_13B, 10**12, 10**7, 1,
                                              512, 1, cluster))
    layout = plan.estimates["layout"]
    assert (layout["data"], layout["tensor"], layout["pipeline"]) == (16, 1, 1) and plan.strategy == "fsdp2"
    assert "supplies no tensor-parallel plan" in next(d.reason for d in plan.decisions if d.name == "layout")
    with_plan = DefaultStrategy().plan(PlanContext("gpt-13b", "language_modeling", FACTS_13B, 10**12, 10**7, 1,
                                                   512, 1, cluster, splits_tensors=True))
    assert with_plan.estimates["layout"]["tensor"] > 1 and with_plan.strategy == "fsdp2"
    assert with_plan.tensor_parallel_size == with_plan.estimates["layout"]["tensor"]
    replicas = with_plan.estimates["layout"]["data"]  # a tensor-parallel group reads one batch: 512 = micro × dp × acc
    assert with_plan.micro_batch_size * replicas * with_plan.accumulate_grad_batches == 512


def test_a_tensor_parallel_size_runs_as_asked_or_is_refused_by_name() -> None:
    """``tensor_parallel_size`` fixes the layout (FSDP2 + TP in Lightning's ModelParallelStrategy, the batch per
    replica), and is refused before anything runs when the algorithm cannot split, the size does not divide the
    processes, or another strategy is forced."""
    small = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**8, activation_bytes_per_sample=10**5,
                       state_bytes=16 * 10**6)
    node = Hardware.cluster(devices=4, device_memory="80GB", nodes=1)

    def plan(splits: bool = True, **overrides: object):  # noqa: ANN202
        return DefaultStrategy().plan(PlanContext("llm", "causal_lm", small, 10**6, 1000, 8, None, 1, node,
                                                  overrides={"devices": 4, **overrides}, splits_tensors=splits))

    planned = plan(tensor_parallel_size=2)
    layout = planned.estimates["layout"]
    assert (layout["data"], layout["tensor"], layout["pipeline"]) == (2, 2, 1) and planned.strategy == "fsdp2"
    assert planned.effective_batch_size == 8 * 2  # two replicas read a batch each; a tensor-parallel pair reads one
    assert planned.layout == ParallelDims(data=2, tensor=2) and planned.layout.tensor_enabled
    strategy, _ = lightning_strategy(planned, sharded=True)  # built in the engine, from the typed layout
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (2, 2)
    assert "tp 2: set by the user" in next(d.reason for d in planned.decisions if d.name == "layout")
    with pytest.raises(PlanningError, match="supplies no tensor-parallel plan"):
        plan(splits=False, tensor_parallel_size=2)
    with pytest.raises(PlanningError, match="does not divide the job's 4"):
        plan(tensor_parallel_size=3)
    with pytest.raises(PlanningError, match="not strategy='ddp'"):
        plan(tensor_parallel_size=2, strategy="ddp")


def test_a_plans_layout_is_a_typed_value_checked_against_its_devices() -> None:
    """``Plan.layout`` is a ``ParallelDims`` whose product must be the plan's devices × nodes (a layout that does
    not add up is refused by name); it survives ``plan.json`` (``to_dict``/``from_dict``), and a plan stored
    before it existed gets its degrees from its estimates (a pre-0.4 layout not ``staged`` ran as FSDP2)."""
    small = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**8, activation_bytes_per_sample=10**5,
                       state_bytes=16 * 10**6)
    node = Hardware.cluster(devices=4, device_memory="80GB", nodes=1)
    planned = DefaultStrategy().plan(PlanContext("llm", "causal_lm", small, 10**6, 1000, 8, None, 1, node,
                                                 overrides={"devices": 4, "tensor_parallel_size": 2},
                                                 splits_tensors=True))
    assert planned.layout == ParallelDims(2, 2, 1) and planned.layout.world_size == 4
    stored = planned.to_dict()
    assert stored["layout"] == {"data": 2, "tensor": 2, "pipeline": 1}
    assert Plan.from_dict(stored).layout == planned.layout
    old = {k: v for k, v in stored.items() if k != "layout"}
    assert Plan.from_dict(old).layout == ParallelDims(2, 2, 1)
    old["estimates"] = {**old["estimates"], "layout": {**old["estimates"]["layout"], "tensor": 1, "pipeline": 2,
                                                       "staged": False}}
    assert Plan.from_dict(old).layout == ParallelDims(4)
    with pytest.raises(ValueError, match=r"layout dp 2 × tp 1 × pp 1 takes 2 processes, but the plan has 4"):
        Plan.from_dict({**stored, "layout": {"data": 2, "tensor": 1, "pipeline": 1}})
    with pytest.raises(ValueError, match="ParallelDims.tensor must be a positive integer, not 0"):
        ParallelDims(2, 0)


def test_pipeline_stages_run_as_asked_or_as_planned_and_bad_sizes_are_refused_by_name() -> None:
    """``pipeline_parallel_size`` (alone or beside ``tensor_parallel_size``) fixes the layout — dp × tp × pp in the
    plan, the stages run by the engine (``Plan.pipeline_parallel_size``), one batch per replica — and a size that
    does not divide the processes is refused before anything runs. The planner plans stages only for an algorithm
    that cuts its network (``Algorithm.pipeline_stages``), and they run as planned."""
    small = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**8, activation_bytes_per_sample=10**5,
                       state_bytes=16 * 10**6)
    node = Hardware.cluster(devices=4, device_memory="80GB", nodes=1)

    def plan(**overrides: object):  # noqa: ANN202
        return DefaultStrategy().plan(PlanContext("llm", "causal_lm", small, 10**6, 1000, 8, None, 1, node,
                                                  overrides={"devices": 4, **overrides}, splits_tensors=True,
                                                  cuts_stages=True))

    staged = plan(pipeline_parallel_size=4)
    layout = staged.estimates["layout"]
    assert (layout["data"], layout["tensor"], layout["pipeline"]) == (1, 1, 4) and staged.strategy == "fsdp2"
    assert staged.pipeline_parallel_size == 4 and staged.tensor_parallel_size == 1
    assert staged.effective_batch_size == 8  # one copy of the model: its four stages read one batch
    assert "pp 4: set by the user" in next(d.reason for d in staged.decisions if d.name == "layout")
    replicated = plan(pipeline_parallel_size=2)  # FSDP2 over two replicas of a two-stage pipeline
    assert (replicated.estimates["layout"]["data"], replicated.pipeline_parallel_size) == (2, 2)
    assert replicated.effective_batch_size == 8 * 2 and replicated.strategy == "fsdp2"
    both = plan(tensor_parallel_size=2, pipeline_parallel_size=2)
    assert (both.tensor_parallel_size, both.pipeline_parallel_size, both.effective_batch_size) == (2, 2, 8)
    assert both.layout == ParallelDims(data=1, tensor=2, pipeline=2)
    assert type(lightning_strategy(both, sharded=True)[0]).__name__ == "PipelineParallelStrategy"
    with pytest.raises(PlanningError, match="pipeline_parallel_size=3 does not divide the job's 4"):
        plan(pipeline_parallel_size=3)
    with pytest.raises(PlanningError, match="tensor_parallel_size=2 × pipeline_parallel_size=4 does not divide"):
        plan(tensor_parallel_size=2, pipeline_parallel_size=4)
    with pytest.raises(PlanningError, match="not strategy='ddp'"):
        plan(pipeline_parallel_size=4, strategy="ddp")

    # 13B on four one-GPU nodes over Ethernet: FSDP2 fits but re-gathers 13B weights every micro-batch across
    # nodes; four stages send one activation instead, so a model that cuts its network gets them, run as planned
    one_gpu_nodes = Hardware.cluster(devices=1, device_memory="80GB", nodes=4)
    for cuts in (False, True):
        planned = DefaultStrategy().plan(PlanContext("gpt-13b", "causal_lm", FACTS_13B, 10**12, 10**7, 1, 64, 1,
                                                     one_gpu_nodes, cuts_stages=cuts))
        layout = planned.estimates["layout"]
        assert (layout["data"], layout["pipeline"]) == ((1, 4) if cuts else (4, 1))
        assert planned.pipeline_parallel_size == layout["pipeline"] and planned.strategy == "fsdp2"
        if cuts:  # estimated steps (no clock): FSDP2's traffic over Ethernet dwarfs the compute
            assert layout["alternatives"]["dp 4 × tp 1 × pp 1"] > 5 * layout["step_seconds"]
