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
    PlanContext,
    PlanningError,
    measure,
    plan_layout,
)

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
    with torch.device("meta"):
        model, ids = GPT(), torch.randint(0, 50304, (2, 2048))
    facts = measure(model, ids)
    assert all(p.is_meta for p in model.parameters())  # nothing was allocated
    assert 12.5e9 < facts.parameters < 13.5e9
    cluster = Hardware.cluster(devices=8, device_memory="80GB", nodes=2, interconnect="nvlink+infiniband")
    plan = DefaultStrategy().plan(PlanContext("gpt-13b", "language_modeling", facts, 10**12, 10**7, 1, 512, 1,
                                              cluster, splits_tensors=True))  # as if it supplied a tensor plan
    layout = plan.estimates["layout"]
    assert (layout["data"], layout["tensor"], layout["pipeline"]) == (8, 2, 1)
    p, act = facts.parameters, facts.activation_bytes_per_sample
    # by hand: bf16 weights and gradients split over tp·pp, fp32 master + Adam (12 B) also over dp, activations /tp
    assert layout["memory"]["weights"] == int(2 * p / 2) and layout["memory"]["optimizer"] == int(12 * p / 16)
    assert layout["memory"]["activations"] == int(act * 0.5 / 2)
    unsplit = 2 * p + 2 * p + 12 * p / 16 + act * 0.5  # tp 1: over 80 % of 80 GB, so tp 2 was needed
    assert unsplit > 64 * GB > layout["memory"]["total"]
    assert layout["step_seconds"] == pytest.approx(
        facts.flops_per_sample * 512 / (16 * 989e12 * 0.4), rel=1e-6)
    text = plan.explain()
    assert "dp 8 × tp 2 × pp 1 (ZeRO-1)" in text and "tensor parallel stays inside a node" in text


def test_few_devices_per_node_need_pipeline_stages() -> None:
    facts = ModelFacts(parameters=13 * 10**9, trainable=13 * 10**9, flops_per_sample=10**14,
                       activation_bytes_per_sample=22 * GB, state_bytes=16 * 13 * 10**9)
    one_gpu_nodes = Hardware.cluster(devices=1, device_memory="80GB", nodes=4)
    layout = plan_layout(facts.parameters, facts.activation_bytes_per_sample, facts.flops_per_sample,
                         one_gpu_nodes, global_batch=64)
    assert layout is not None and (layout.data, layout.tensor, layout.pipeline) == (1, 1, 4)
    assert layout.bubble == round(3 / (64 + 3), 4)  # 64 micro-batches of 1 through 4 stages
    assert layout.memory["total"] == int(2 * 13e9 / 4) * 2 + int(12 * 13e9 / 4) + int(22 * GB * 0.5)
    assert plan_layout(facts.parameters, facts.activation_bytes_per_sample, facts.flops_per_sample,
                       Hardware.cluster(devices=1, device_memory="24GB", nodes=2), global_batch=64) is None


def test_a_model_that_fits_gets_no_layout() -> None:
    facts = ModelFacts(parameters=10**6, trainable=10**6, flops_per_sample=10**7, activation_bytes_per_sample=10**4,
                       state_bytes=16 * 10**6)
    plan = DefaultStrategy().plan(PlanContext("mlp", "tabular_classification", facts, 10**6, 1000, 32, None, 5,
                                              Hardware.cluster(devices=8, device_memory="80GB")))
    assert "layout" not in plan.estimates and all(d.name != "layout" for d in plan.decisions)


FACTS_13B = ModelFacts(parameters=13 * 10**9, trainable=13 * 10**9, flops_per_sample=10**14,
                       activation_bytes_per_sample=8 * GB, state_bytes=16 * 13 * 10**9)


def test_a_model_without_a_tensor_parallel_plan_gets_no_tensor_factor_and_the_plan_says_why() -> None:
    """The 13B model that gets tp 2 when it can split (above) gets pipeline stages instead when its algorithm
    supplies no tensor-parallel plan, and the reason names the missing hook."""
    cluster = Hardware.cluster(devices=8, device_memory="80GB", nodes=2, interconnect="nvlink+infiniband")
    plan = DefaultStrategy().plan(PlanContext("resnet-13b", "image_classification", FACTS_13B, 10**12, 10**7, 1,
                                              512, 1, cluster))
    layout = plan.estimates["layout"]
    assert layout["tensor"] == 1 and layout["pipeline"] > 1
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
    strategy = planned.lightning_strategy()
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (2, 2)
    assert "tp 2: set by the user" in next(d.reason for d in planned.decisions if d.name == "layout")
    with pytest.raises(PlanningError, match="supplies no tensor-parallel plan"):
        plan(splits=False, tensor_parallel_size=2)
    with pytest.raises(PlanningError, match="does not divide the job's 4"):
        plan(tensor_parallel_size=3)
    with pytest.raises(PlanningError, match="not strategy='ddp'"):
        plan(tensor_parallel_size=2, strategy="ddp")


def test_pipeline_stages_run_as_asked_or_as_planned_and_bad_sizes_are_refused_by_name() -> None:
    """``pipeline_parallel_size`` (alone or beside ``tensor_parallel_size``) fixes the layout — dp × tp × pp in the
    plan, the stages run by the engine (``Plan.pipeline_parallel_size``), one batch per replica — and a size that
    does not divide the processes is refused before anything runs. A planned layout with stages runs them only for
    an algorithm that cuts its network (``Algorithm.pipeline_stages``); otherwise the plan says it runs as FSDP2."""
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
    with pytest.raises(PlanningError, match="replicas of a pipeline"):  # FSDP2 × stages: not yet
        plan(pipeline_parallel_size=2)
    both = plan(tensor_parallel_size=2, pipeline_parallel_size=2)
    assert (both.tensor_parallel_size, both.pipeline_parallel_size, both.effective_batch_size) == (2, 2, 8)
    with pytest.raises(PlanningError, match="pipeline_parallel_size=3 does not divide the job's 4"):
        plan(pipeline_parallel_size=3)
    with pytest.raises(PlanningError, match="tensor_parallel_size=2 × pipeline_parallel_size=4 does not divide"):
        plan(tensor_parallel_size=2, pipeline_parallel_size=4)
    with pytest.raises(PlanningError, match="not strategy='ddp'"):
        plan(pipeline_parallel_size=4, strategy="ddp")

    one_gpu_nodes = Hardware.cluster(devices=1, device_memory="80GB", nodes=4)  # 13B: stages are needed
    for cuts in (False, True):
        planned = DefaultStrategy().plan(PlanContext("gpt-13b", "causal_lm", FACTS_13B, 10**12, 10**7, 1, 64, 1,
                                                     one_gpu_nodes, cuts_stages=cuts))
        assert planned.estimates["layout"]["pipeline"] == 4
        assert planned.pipeline_parallel_size == (4 if cuts else 1)
        reason = next(d.reason for d in planned.decisions if d.name == "layout")
        assert ("does not cut its network into pipeline stages" in reason) is not cuts
