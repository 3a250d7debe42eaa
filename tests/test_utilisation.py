"""Every run records its utilisation — throughput, achieved FLOP/s, MFU against the device's peak and the share
of step time spent waiting for data — and ``twinkle runs show`` prints it."""

from __future__ import annotations

import json
import time

import lightning as L
import pytest
import torch
from click.testing import CliRunner
from torch.utils.data import DataLoader, Dataset

from twinkle_core import RunStore, Trainer
from twinkle_core.cli import main
from twinkle_core.engine.utilisation import Utilisation, device_peak, remembered_cpu_peak, tokens_per_sample


def test_a_run_records_and_shows_its_utilisation(twinkle_home, cancer_csv) -> None:
    result = Trainer("tabular-mlp", hyperparams={"max_epochs": 2}, project="util", verbose=False).fit(str(cancer_csv))
    measured = RunStore().get(result.run_uri).measured
    assert measured["samples_per_second"] > 0 and measured["job_samples_per_second"] == measured["samples_per_second"]
    flops = result.plan.estimates["flops_per_sample"]
    assert measured["achieved_flops_per_second"] == pytest.approx(
        flops * measured["samples_per_second"], rel=1e-3)
    assert 0 < measured["mfu"] <= 1 and measured["peak_source"].startswith("measured: fp32 matmul")
    assert 0 <= measured["data_wait_fraction"] < 1
    text = CliRunner().invoke(main, ["runs", "show", result.run_uri]).output
    assert "utilisation:" in text and "MFU" in text and "data wait" in text


class _Slow(Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int):
        time.sleep(0.01)  # a loader that cannot keep up
        return torch.randn(4), torch.randn(1)


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_slow_loader_shows_as_data_wait(tmp_path) -> None:
    meter = Utilisation()
    trainer = L.Trainer(max_epochs=1, callbacks=[meter], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(_Tiny(), DataLoader(_Slow(), batch_size=4))
    figures = meter.figures(100.0, 1, "cpu", "cpu", "32-true", 1)
    assert meter.steps == 10 and figures["data_wait_fraction"] > 0.5  # 4 × 10 ms per batch vs a tiny step


def test_peaks_and_tokens() -> None:
    assert device_peak("cuda", "NVIDIA H200", "bf16-mixed", 1) == (989e12, "datasheet: H200 dense bf16/fp16")
    assert device_peak("cuda", "NVIDIA A100-SXM4-80GB", "32-true", 1)[0] == 156e12
    assert device_peak("cuda", "Some New GPU", "bf16-mixed", 1)[0] is None
    assert tokens_per_sample((128,), "int64") == 128 and tokens_per_sample((3, 32, 32), "float32") is None


def test_a_cpu_peak_is_measured_once_per_machine_and_remembered_in_the_store(tmp_path) -> None:
    """The first run on a machine measures the CPU's peak and stores it; the next reads that same figure (repeated
    runs divide by one peak, and pay no second measurement); an unreadable stored figure, or one below what a run
    achieved (disturbed when measured), is measured again."""
    home = str(tmp_path)
    first, read = remembered_cpu_peak(home, 1, torch.float32)
    assert first > 0 and not read
    [stored] = (tmp_path / "probes").glob("peak-*.json")
    assert remembered_cpu_peak(home, 1, torch.float32) == (first, True)
    peak, source = device_peak("cpu", "cpu", "32-true", 1, home)
    assert peak == first and source.startswith("measured earlier: fp32 matmul 1024² on 1 thread(s)")
    stored.write_text("{not json")
    again, read = remembered_cpu_peak(home, 1, torch.float32)
    assert again > 0 and not read and json.loads(stored.read_text())["flops_per_second"] == again
    stored.write_text(json.dumps({"flops_per_second": 1.0}))  # a run achieved more than this
    peak, read = remembered_cpu_peak(home, 1, torch.float32, at_least=2.0)
    assert peak > 2.0 and not read and json.loads(stored.read_text())["flops_per_second"] == peak


class _Clock:
    """A stand-in for ``time`` in ``twinkle_core.engine.utilisation``: it moves only when told (a step's seconds,
    a peak check's 0.025 s), so the checks' schedule is asserted without timing anything."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _steps(meter: Utilisation, clock: _Clock, seconds: list[float], batch: int = 8) -> None:
    """``meter`` sees training steps that took ``seconds`` each on ``clock`` (as Lightning calls it)."""
    for step in seconds:
        meter.on_train_batch_start(None, None, None, 0)
        clock.now += step
        meter.on_train_batch_end(None, None, None, torch.zeros(batch, 1), 0)


def test_a_cpu_run_checks_its_peak_as_it_starts_and_between_steps_and_divides_by_the_best_check(
        tmp_path, monkeypatch) -> None:
    """A CPU run checks the peak's matmul in its peak precision as training starts (3 times where 1 % of the planned
    training allows: none for a run planned under 2 s), then between steps while the checks take at most 1 % of its
    step time, never counting a check as compute or data wait; with 3 checks or more its MFU divides by their best
    (the peak under the conditions it trained in), and where the run achieved more than that, by the remembered
    peak (measured again if need be): never above 1. A GPU run divides by its datasheet peak. (On a made-up clock
    where each check takes 0.025 s; one real check measures a rate.)"""
    from twinkle_core.engine import utilisation

    assert Utilisation(peak_precision="bf16-mixed").check_peak() > 0  # the real matmul, once
    clock, rates = _Clock(), iter(range(1, 100))

    def check(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, seconds: float) -> float:
        clock.now += seconds + 0.005
        return 4e11 + 1e9 * next(rates)  # each check a little higher: the best is the newest

    monkeypatch.setattr(utilisation, "time", clock)
    monkeypatch.setattr(utilisation, "matmul_rate", check)
    monkeypatch.setattr(utilisation, "_CPU_PEAK", {})  # the remembered peak below is the made-up one, kept apart
    short = Utilisation(peak_precision="bf16-mixed", planned_seconds=1.5)
    short.on_train_start(None, None)
    _steps(short, clock, [0.1] * 10)
    assert short.peak_checks == []  # 1 % of 1.5 s is less than a check: the remembered peak
    flops = 1e6  # a sample's FLOPs that keep the achieved rate far below any peak
    assert short.figures(flops, 1, "cpu", "cpu", "bf16-mixed", 1, home=str(tmp_path))["peak_source"].startswith(
        "measured: bf16 matmul")

    meter = Utilisation(peak_precision="bf16-mixed", planned_seconds=30.0)
    meter.on_train_start(None, None)
    assert len(meter.peak_checks) == 3 and meter.check_seconds == pytest.approx(0.075)
    _steps(meter, clock, [1.0] * 9)
    assert len(meter.peak_checks) == 3  # between steps, the checks wait until 1 % of the step time pays for them
    _steps(meter, clock, [1.0] * 12)  # then one after steps 10, 12, 15, 17 and 20 (0.075 s + 0.025 s each ≤ 1 %)
    checks = len(meter.peak_checks)
    assert checks == 8 and meter.check_seconds == pytest.approx(0.2)
    assert meter.compute_seconds == pytest.approx(21.0) and meter.wait_seconds == pytest.approx(0.0)
    figures = meter.figures(flops, 1, "cpu", "cpu", "32-true", torch.get_num_threads(), home=str(tmp_path))
    assert figures["peak_flops_per_second"] == float(f"{max(meter.peak_checks):.4g}")
    assert figures["peak_source"].startswith("measured during the run: bf16 matmul 1024²") and \
        f"best of {checks} checks" in figures["peak_source"]
    above = max(meter.peak_checks) * 1.5 / (meter.samples / (meter.compute_seconds + meter.wait_seconds))
    figures = meter.figures(above, 1, "cpu", "cpu", "bf16-mixed", torch.get_num_threads(), home=str(tmp_path))
    assert not figures["peak_source"].startswith("measured during the run")
    assert figures["mfu"] is None or figures["mfu"] <= 1
    plain = Utilisation()  # no peak precision: no checks (a GPU run), the datasheet's peak
    plain.on_train_start(None, None)
    _steps(plain, clock, [3.0])
    assert plain.peak_checks == []
    assert plain.figures(flops, 1, "cuda", "NVIDIA H200", "bf16-mixed", 1)["peak_source"] == \
        "datasheet: H200 dense bf16/fp16"
