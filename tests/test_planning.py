"""Resource plans: every rule of the default strategy, each choice explained, and history reuse."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from twinkle_core import Trainer
from twinkle_core.planning import (DefaultStrategy, Hardware, ModelFacts, ParallelDims, PastRun, PlanContext, measure,
                                    stored_bytes)

GB = 10**9
CPU = Hardware("cpu", 1, "cpu", 24 * GB, False, False, 2, 24 * GB)
H200 = Hardware("cuda", 8, "NVIDIA H200", 141 * GB, True, True, 64, 2000 * GB)
H200_DS = Hardware("cuda", 8, "NVIDIA H200", 141 * GB, True, True, 64, 2000 * GB, deepspeed=True)
V100 = Hardware("cuda", 4, "Tesla V100", 32 * GB, False, True, 32, 500 * GB)


def facts(params: float, activation: int = 10_000) -> ModelFacts:
    p = int(params)
    return ModelFacts(p, p, 6 * p, activation, 16 * p)


def plan(hardware=CPU, model=None, **kwargs):
    values = dict(algorithm_name="algo", task="image_classification", facts=model or facts(1e6), data_bytes=10**6,
                  train_samples=10_000, batch_size=32, effective_batch_size=None, max_epochs=10, hardware=hardware)
    values.update(kwargs)
    return DefaultStrategy().plan(PlanContext(**values))


def reasons(p) -> dict[str, str]:
    return {d.name: d.reason for d in p.decisions}


def test_cpu_small_model() -> None:
    p = plan()
    assert (p.accelerator, p.devices, p.precision, p.strategy) == ("cpu", 1, "32-true", "auto")
    assert (p.micro_batch_size, p.accumulate_grad_batches, p.data_loading, p.num_workers) == (32, 1, "in-memory", 0)
    assert all(d.reason for d in p.decisions)
    assert p.estimates["optimizer_steps_per_epoch"] == 313 and p.estimates["hardware"] == "cpu:2"
    assert "no GPU found" in p.explain()


def test_gpu_precision_by_capability() -> None:
    assert plan(H200).precision == "bf16-mixed"
    assert plan(V100).precision == "16-mixed"
    assert plan(H200, supports_mixed_precision=False).precision == "32-true"


def test_single_device_below_100m_parameters() -> None:
    p = plan(H200, facts(50e6))
    assert p.devices == 1 and p.strategy == "auto"
    assert "< 100.0M" in reasons(p)["devices"]


@pytest.mark.parametrize(
    ("hardware", "params", "strategy"),
    [(H200, 1e9, "ddp"), (H200, 7e9, "fsdp2"), (H200_DS, 70e9, "deepspeed_stage_3_offload"), (H200, 70e9, "fsdp2")],
)
def test_distribution_by_model_size(hardware, params, strategy) -> None:
    p = plan(hardware, facts(params))
    assert p.devices == 8 and p.strategy == strategy
    assert "training state" in reasons(p)["strategy"]
    if strategy == "fsdp2" and params > 10e9:  # DeepSpeed would be the choice, but it is not installed
        assert "twinkle-core[deepspeed]" in reasons(p)["strategy"]


def test_deepspeed_is_never_planned_on_cpu() -> None:
    cpu_ds = Hardware("cpu", 1, "cpu", 24 * GB, False, False, 2, 24 * GB, deepspeed=True)
    p = plan(cpu_ds, facts(2e9), overrides={"devices": 2})
    assert p.strategy == "fsdp2" and "DeepSpeed needs CUDA" in reasons(p)["strategy"]


def test_a_memory_limit_makes_a_state_that_fits_only_sharded_use_fsdp2() -> None:
    model = facts(1e6)
    p = plan(model=model, overrides={"devices": 2}, memory_limit_bytes=2 * model.state_bytes)
    assert p.strategy == "fsdp2" and "fits only sharded over 2 devices" in reasons(p)["strategy"]
    assert p.layout == ParallelDims(data=2)
    from lightning.pytorch.strategies import ModelParallelStrategy

    from twinkle_core.engine.strategies import lightning_strategy

    assert isinstance(lightning_strategy(p, sharded=True)[0], ModelParallelStrategy)


def test_accumulation_keeps_the_effective_batch() -> None:
    p = plan(batch_size=32, effective_batch_size=256)
    assert (p.micro_batch_size, p.accumulate_grad_batches, p.effective_batch_size) == (32, 8, 256)
    big = plan(V100, facts(1e8, activation=200 * 10**6), batch_size=256, effective_batch_size=256)
    assert big.micro_batch_size < 256
    assert big.micro_batch_size * big.devices * big.accumulate_grad_batches == 256
    assert "would need" in reasons(big)["micro_batch_size"]


def test_sharded_loading_for_data_larger_than_memory() -> None:
    p = plan(data_bytes=2 * 10**12)  # the article's "> 1 TB"
    assert p.data_loading == "sharded" and p.num_workers == 1
    assert "2.0 TB" in reasons(p)["data_loading"] and "shards" in reasons(p)["data_loading"]
    capped = plan(data_bytes=10**6, memory_limit_bytes=10**6)
    assert capped.data_loading == "sharded" and "the memory limit" in reasons(capped)["data_loading"]


def test_a_strategy_replaces_one_decider_and_keeps_the_rest() -> None:
    from twinkle_core.planning import PlanContext, PrecisionDecider

    class AlwaysBf16(PrecisionDecider):
        def decide(self, draft):
            draft.decide("precision", "bf16-mixed", "this plugin's models are trained in bf16")

    class Bf16Strategy(DefaultStrategy):
        name = "bf16"
        deciders = DefaultStrategy.replacing(precision=AlwaysBf16())

    context = PlanContext("algo", "image_classification", facts(1e6), 10**6, 10_000, 32, None, 10, CPU)
    p = Bf16Strategy().plan(context)
    assert p.precision == "bf16-mixed" and reasons(p)["precision"].startswith("this plugin")
    assert [d.name for d in p.decisions] == [d.name for d in DefaultStrategy().plan(context).decisions]
    with pytest.raises(KeyError, match="the concerns are"):
        DefaultStrategy.replacing(colour=AlwaysBf16())


def test_the_explanation_shows_the_estimates() -> None:
    text = plan(model=facts(2e6)).explain()
    assert "estimates: 2.0M parameters, 12.0M FLOPs/sample, training state 32.0 MB, ~" in text
    assert "(from FLOPs)" in text


def test_history_supplies_measurements() -> None:
    history = [{"id": "u/p/run3", "measured": {"micro_batch_size": 16, "seconds_per_sample": 0.001}}]
    p = plan(history=history)
    assert p.history_run == "u/p/run3" and p.micro_batch_size == 16 and p.accumulate_grad_batches == 2
    assert p.estimates["estimated_seconds"] == 100.0 and p.estimates["estimate_source"] == "u/p/run3"


def test_past_runs_are_typed_and_the_micro_batch_names_the_run_that_measured_it() -> None:
    """A strategy reads ``PastRun`` fields (records given as dicts, as before 0.3, convert); the micro-batch
    reused is the newest one measured, and its decision names that run, not merely the newest run."""
    history = [PastRun("u/p/run9", seconds_per_sample=0.002),
               {"id": "u/p/run5", "measured": {"micro_batch_size": 8, "seconds_per_sample": 0.004}}]
    context = PlanContext(algorithm_name="algo", task="image_classification", facts=facts(1e6), data_bytes=10**6,
                          train_samples=10_000, batch_size=32, effective_batch_size=None, max_epochs=10,
                          hardware=CPU, history=history)
    assert context.history[1] == PastRun("u/p/run5", 8, 0.004, {"micro_batch_size": 8, "seconds_per_sample": 0.004})
    p = DefaultStrategy().plan(context)
    assert p.micro_batch_size == 8 and reasons(p)["micro_batch_size"] == "largest micro-batch that fitted in run u/p/run5"
    assert p.estimates["estimate_source"] == "u/p/run9" and p.history_run == "u/p/run9"


def test_user_overrides_win() -> None:
    p = plan(H200, overrides={"precision": "32-true", "devices": 2})
    assert p.precision == "32-true" and p.devices == 2
    assert reasons(p)["precision"] == "set by the user"


def test_measure_counts_parameters_flops_and_activations() -> None:
    model = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 2))
    m = measure(model, torch.randn(2, 30))
    assert m.parameters == 30 * 64 + 64 + 64 * 2 + 2
    forward = 2 * (30 * 64 + 64 * 2)
    # backward: weight gradients of both layers, input gradient of the second only (the data needs none)
    assert m.flops_per_sample == forward + forward + 2 * 64 * 2
    assert m.activation_bytes_per_sample == 4 * (64 + 64 + 2)
    assert m.state_bytes == 16 * m.parameters
    assert all(p.grad is None for p in model.parameters())
    model[0].requires_grad_(False)  # a frozen base counts what it holds: 4 bytes a value in fp32, 2 in bf16
    frozen = 30 * 64 + 64
    assert measure(model, torch.randn(2, 30)).state_bytes == 16 * (m.parameters - frozen) + 4 * frozen
    assert stored_bytes(model[0].weight.detach().to(torch.bfloat16)) == 2 * 30 * 64


def test_trainer_plan_reuses_a_finished_run(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 1, "batch_size": 64}, verbose=False)
    assert trainer.plan(str(cancer_csv)).history_run is None
    first = trainer.fit(str(cancer_csv))
    again = Trainer("tabular-mlp", hyperparams={"max_epochs": 3}, verbose=False).plan(str(cancer_csv))
    assert again.history_run == first.run_uri.removeprefix("twinkle://")
    assert again.estimates["estimate_source"] == again.history_run


def test_the_memory_line_adds_up_state_a_frozen_base_and_activations_per_token() -> None:
    """The plan's ``memory`` decision is the state (16 B per trainable parameter, what the frozen ones hold) plus the
    activations and their gradients × the micro-batch, said per token for token inputs; under FSDP2 the state is
    divided between the shards."""
    lora = ModelFacts(parameters=1_000_000, trainable=10_000, flops_per_sample=6_000_000,
                      activation_bytes_per_sample=64_000, state_bytes=16 * 10_000 + 4 * 990_000)
    p = plan(model=lora, tokens_per_sample=128)
    memory = next(d for d in p.decisions if d.name == "memory")
    assert memory.value == "8.2 MB"  # 4.12 MB of state + 2 × 64 kB × 32 = 4.1 MB of activations
    assert "16 B × 10.0k trainable + 990.0k frozen weights 4.0 MB = 4.1 MB" in memory.reason
    assert "2 × 500 B per token × 128 tokens × 32 = 4.1 MB" in memory.reason
    sharded = reasons(plan(H200, facts(7e9)))["memory"]
    assert "/ 8 shards = 14.0 GB" in sharded and "per sample" in sharded


def test_the_training_length_gives_small_data_enough_steps_and_says_why() -> None:
    """Without max_epochs or max_steps the plan trains 10 epochs when they give 500 optimizer steps, and lengthens a
    small data set's run to reach them (at most 100 epochs; an algorithm's own minimum wins); max_steps alone ends
    the run without an epoch limit, and one that ends inside the first epoch validates at its last step. A user's
    value wins. The estimated time counts only the steps the run takes (the issue's plan said ~5.9 min for 5 steps
    of ResNet-50, costed as 10 epochs)."""
    big = plan(max_epochs=None)  # 10,000 samples in batches of 32: 313 steps an epoch
    assert big.max_epochs == 10 and "10 epochs × 313 optimizer steps" in reasons(big)["max_epochs"]
    small = plan(max_epochs=None, train_samples=455)  # the cancer table: 15 steps an epoch
    assert small.max_epochs == 34 and small.estimates["optimizer_steps"] == 510
    assert "at least 500 steps, at most 100 epochs" in reasons(small)["max_epochs"]
    tiny = plan(max_epochs=None, train_samples=100, min_optimizer_steps=1000)  # 4 steps an epoch
    assert tiny.max_epochs == 100 and "algo needs at least 1000 steps" in reasons(tiny)["max_epochs"]
    assert plan(max_epochs=3, train_samples=455).max_epochs == 3  # the user's
    short = plan(max_epochs=None, max_steps=5)
    assert short.max_epochs == -1 and short.val_check_interval == 5 and short.estimates["optimizer_steps"] == 5
    assert "validate after training batch 5" in reasons(short)["val_check_interval"]
    ten_epochs = plan(max_epochs=None).estimates["estimated_seconds"]
    assert short.estimates["estimated_seconds"] == pytest.approx(ten_epochs * 5 / 3130, rel=0.05)
    assert plan(max_epochs=None, max_steps=5, val_check_interval=0.5).val_check_interval == 0.5
    assert plan(max_epochs=None, max_steps=1000).val_check_interval is None  # several epochs: every epoch's end


def test_several_updates_per_batch_repeat_whole_optimizer_steps_and_lengthen_the_epoch(monkeypatch) -> None:
    """An algorithm making 3 updates per batch (reinforcement learning's ``updates_per_rollout``): the plan counts
    each whole optimizer-step batch 3 times (10,000 samples in steps of 32: 312 whole batches, the incomplete one
    left out, × 3 = 936 steps an epoch); the loader yields each step's micro-batches 3 times in a row — the same
    samples, whole chunks only, every sample of the epoch in exactly one chunk — and ranks split it alike; a split
    smaller than one step is a named error."""
    from twinkle_core.engine import loaders
    from twinkle_core.errors import HyperparameterError

    assert plan(updates_per_batch=3).estimates["optimizer_steps_per_epoch"] == 312 * 3
    sampler = loaders.EpochShuffle(11, seed=0, repeats=3, chunk=4)  # 11 samples, 2 micro-batches of 2 a step
    order = list(sampler)
    assert len(order) == len(sampler) == 2 * 4 * 3
    chunks = [order[i:i + 4] for i in range(0, len(order), 4)]
    assert chunks[0] == chunks[1] == chunks[2] and chunks[3] == chunks[4] == chunks[5] != chunks[0]
    plain = list(loaders.EpochShuffle(11, seed=0))  # one update per batch: the epoch's order, every sample once
    assert sorted(plain) == list(range(11)) and chunks[0] + chunks[3] == plain[:8]  # its whole chunks, 3 left out
    monkeypatch.setattr(loaders, "data_rank_and_world", lambda: (1, 2))  # rank 1 of 2: 6 samples, one chunk
    assert len(list(loaders.EpochShuffle(11, seed=0, repeats=3, chunk=4))) == 4 * 3
    with pytest.raises(HyperparameterError, match="makes 3 updates per batch of 32 samples .* has 20 per replica"):
        plan(updates_per_batch=3, train_samples=20)
