"""Budgets (forecast, 80 % alert, stop at 100 %, resume) and memory (batch scaling, OOM retry)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from twinkle_core import RunStore, Trainer
from twinkle_core.errors import TwinkleError
from twinkle_core.ops.budget import BudgetConfig, BudgetError, Usage, load_prices
from twinkle_core.ops.memory import step_bytes


def test_price_table_and_overrides(monkeypatch, tmp_path) -> None:
    table = load_prices()
    assert {"aws", "gcp", "azure", "local"} <= set(table)
    config = BudgetConfig(max_gpu_hours=50, cloud_provider="aws")
    instance, per_gpu = config.hourly_price("cuda")
    assert instance == "p4d.24xlarge" and per_gpu == pytest.approx(32.77 / 8)
    custom = tmp_path / "prices.json"
    custom.write_text('{"aws": {"instances": {"p4d.24xlarge": {"gpus": 8, "usd_per_hour": 16.0}}}}')
    monkeypatch.setenv("TWINKLE_PRICES", str(custom))
    assert BudgetConfig(max_cost=10, cloud_provider="aws").hourly_price("cuda")[1] == 2.0
    own = BudgetConfig(max_cost=1, cloud_provider="onprem",
                       prices={"onprem": {"default_gpu_instance": "dgx", "default_cpu_instance": "dgx",
                                          "instances": {"dgx": {"gpus": 8, "vcpus": 128, "usd_per_hour": 8.0}}}})
    assert own.hourly_price("cpu") == ("dgx", 8.0 / 128)
    assert Usage.of(3600, "cuda", 8, 1, 2.0) == Usage(8.0, 0.0, 16.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "needs max_gpu_hours, max_cpu_hours or max_cost"),
     ({"max_gpu_hours": 1, "cloud_provider": "ibm"}, "unknown cloud_provider 'ibm'"),
     ({"max_gpu_hours": 1, "instance_type": "p9.huge"}, "instance_type 'p9.huge' has no price")],
)
def test_bad_budgets(twinkle_home, kwargs, message) -> None:
    with pytest.raises(BudgetError, match=message):
        Trainer("tabular-mlp", verbose=False).set_budget_alert(**kwargs)


def test_budget_alerts_at_80_then_stops_and_resumes(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 30, "batch_size": 16}, verbose=False)
    trainer.set_budget_alert(max_cpu_hours=0.3 / 3600, cloud_provider="aws")  # 0.3 s of one core
    result = trainer.fit(str(cancer_csv))
    kinds = [(a["kind"], a["action"]) for a in result.alerts]
    assert kinds == [("budget", "log"), ("budget", "stop")]
    assert result.alerts[0]["fraction"] >= 0.8 and result.alerts[1]["fraction"] >= 1.0
    assert result.status == "stopped" and "max_cpu_hours reached" in result.stop_reason
    record = RunStore().get(result.run_uri)
    assert record.status == "stopped" and Path(result.alerts[1]["checkpoint"]).exists()
    stopped_at = torch.load(result.alerts[1]["checkpoint"], weights_only=True)["global_step"]
    assert 0 < stopped_at < 30 * 29
    resumed = Trainer.from_checkpoint(result.run_uri, mode="resume").fit()
    assert resumed.status == "finished" and resumed.parent == result.run_uri
    assert torch.load(resumed.last_checkpoint, weights_only=True)["global_step"] == 30 * 29


def test_one_slow_step_past_both_thresholds_still_alerts_before_it_stops(tmp_path) -> None:
    from types import SimpleNamespace

    from twinkle_core.ops.budget import BudgetGuard

    times = iter([0.0, 0.1, 2.0])  # start, a step at 10 %, then one step that ends at 200 %
    plan = SimpleNamespace(accelerator="cpu", devices=1, num_nodes=1, torch_threads=1)
    alerts: list = []
    guard = BudgetGuard(BudgetConfig(max_cpu_hours=1 / 3600, cloud_provider="aws"), plan, alerts.append,
                        str(tmp_path / "last.ckpt"), clock=lambda: next(times))
    trainer = SimpleNamespace(current_epoch=0, global_step=1, should_stop=False, checkpoint_callbacks=[],
                              save_checkpoint=lambda path: Path(path).write_bytes(b"ckpt"), is_global_zero=True,
                              strategy=SimpleNamespace(broadcast=lambda obj, src=0: obj))
    guard.on_train_start(trainer, None)
    guard.on_train_batch_end(trainer, None, None, None, 0)
    assert alerts == []
    guard.on_train_batch_end(trainer, None, None, None, 1)
    assert [a.action for a in alerts] == ["log", "stop"] and trainer.should_stop


def test_forecast_warns_before_training(twinkle_home, cancer_csv) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"max_epochs": 1}, verbose=False)
    trainer.set_budget_alert(max_cpu_hours=1e-12, cloud_provider="local")
    result = trainer.fit(str(cancer_csv))
    assert result.alerts[0]["rule"] == "forecast" and result.alerts[0]["fraction"] > 1


def test_auto_batch_scaling_finds_what_fits(twinkle_home, cancer_csv) -> None:
    probe = Trainer("tabular-mlp", hyperparams={"batch_size": 64}, verbose=False).plan(str(cancer_csv))
    from twinkle_core.ops.memory import facts_of

    facts = facts_of(probe)
    limit = step_bytes(facts, 20)  # room for 20 samples per step
    without = Trainer("tabular-mlp", hyperparams={"batch_size": 64, "memory_limit_bytes": limit}, verbose=False)
    with pytest.raises(torch.OutOfMemoryError, match="a step of 64 samples needs"):
        without.fit(str(cancer_csv))
    assert RunStore().list()[0].status == "failed"
    trainer = Trainer("tabular-mlp", hyperparams={"batch_size": 64, "max_epochs": 3, "auto_batch_scaling": True,
                                                  "memory_limit_bytes": limit}, verbose=False)
    result = trainer.fit(str(cancer_csv))
    plan = result.plan
    assert (plan.micro_batch_size, plan.accumulate_grad_batches, plan.effective_batch_size) == (16, 4, 64)
    reason = {d.name: d.reason for d in plan.decisions}["micro_batch_size"]
    assert "tried 64 (out of memory), 32 (out of memory), 16" in reason
    assert result.status == "finished"
    # the next plan for the same algorithm, data and hardware starts from the micro-batch measured here
    assert Trainer("tabular-mlp", hyperparams={"batch_size": 64}, verbose=False).plan(str(cancer_csv)).micro_batch_size == 16


class OOMOnce(L.Callback):
    """Raises an out-of-memory error once, at a given step (as a fragmenting GPU would)."""

    def __init__(self, step: int) -> None:
        self.step, self.fired = step, False

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not self.fired:
            self.fired = True
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("oom_step", [3, 12])  # before and after the first epoch's checkpoint (8 steps/epoch)
def test_oom_retries_with_half_batch_and_keeps_effective_batch(twinkle_home, cancer_csv, oom_step) -> None:
    trainer = Trainer("tabular-mlp", hyperparams={"batch_size": 64, "max_epochs": 4, "auto_batch_scaling": True},
                      verbose=False, callbacks=[OOMOnce(oom_step)])
    result = trainer.fit(str(cancer_csv))
    assert result.status == "finished"
    plan = result.plan
    assert (plan.micro_batch_size, plan.accumulate_grad_batches, plan.effective_batch_size) == (32, 2, 64)
    (alert,) = result.alerts
    assert alert["kind"] == "oom" and alert["effective_batch_size"] == 64
    assert ("the last checkpoint" in alert["message"]) == (oom_step > 8)
    assert RunStore().get(result.run_uri).plan["decisions"][-1]["name"] == "oom_retry"
    assert result.best_metric >= 0.9


def test_gradient_checkpointing_needs_support(twinkle_home, cancer_csv) -> None:
    with pytest.raises(TwinkleError, match="does not support gradient checkpointing"):
        Trainer("tabular-mlp", hyperparams={"gradient_checkpointing": True}, verbose=False).fit(str(cancer_csv))
