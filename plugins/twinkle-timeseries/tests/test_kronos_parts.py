"""Kronos's parts on their own: sizes, the BSQ quantiser, causality, the coarse→fine dependency, sampling."""

from __future__ import annotations

import pytest
import torch

from twinkle_core.data import DataSpec
from twinkle_core.errors import HyperparameterError
from twinkle_timeseries.kronos import (
    BinarySphericalQuantizer,
    KronosBase,
    KronosMini,
    KronosModel,
    KronosPredictor,
    KronosSmall,
    KronosTiny,
    KronosTokenizer,
    sample_logits,
)

SPEC = DataSpec("time_series_forecasting", (30, 5), target_shape=(10, 5))


def _predictor_parameters(cls: type[KronosModel]) -> int:
    with torch.device("meta"):
        model = cls()
        model.configure_data(SPEC)
    return sum(p.numel() for p in model.network.predictor.parameters())


@pytest.mark.parametrize(("cls", "millions"), [(KronosMini, 4.1), (KronosSmall, 24.7), (KronosBase, 102.3)])
def test_registered_sizes_have_the_published_parameter_counts(cls, millions) -> None:
    assert _predictor_parameters(cls) / 1e6 == pytest.approx(millions, rel=0.01)


def test_size_defaults_show_in_the_hyperparameters_and_context_is_checked() -> None:
    assert KronosMini.hyperparameters()["max_context"].default == 2048
    assert KronosBase.hyperparameters()["d_model"].default == 832
    assert KronosTiny().d_model == 64 and KronosTiny(d_model=32).d_model == 32
    with pytest.raises(HyperparameterError, match="windows of 40 bars exceed max_context=32"):
        KronosTiny(max_context=32).configure_data(SPEC)


def test_bsq_codes_are_sphere_corners_with_straight_through_gradients() -> None:
    torch.manual_seed(0)
    quantizer = BinarySphericalQuantizer(bits=8)
    z = torch.randn(4, 7, 8, requires_grad=True)
    values, bits, loss = quantizer(z)
    assert torch.allclose(values.abs(), torch.full_like(values, 8**-0.5))
    assert torch.allclose(values.norm(dim=-1), torch.ones(4, 7))
    assert torch.equal(bits, (z > 0).long()) and torch.allclose(quantizer.values(bits), values)
    (values.sum() + loss).backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_tokens_round_trip_and_everything_is_causal() -> None:
    torch.manual_seed(0)
    tokenizer = KronosTokenizer(5, 32, 4, 64, 1, 1, s1_bits=4, s2_bits=3).eval()
    x = torch.randn(2, 12, 5)
    coarse, fine = tokenizer.encode(x)
    assert coarse.max() < 16 and fine.max() < 8
    out = tokenizer(x)
    assert torch.equal(out.coarse, coarse) and torch.equal(out.fine, fine)
    assert torch.allclose(tokenizer.decode(coarse, fine), out.reconstruction, atol=1e-5)
    assert torch.allclose(tokenizer.decode(coarse), out.coarse_reconstruction, atol=1e-5)
    changed = x.clone()
    changed[:, 8:] += 3.0  # the future must not change the past's tokens or reconstruction
    c2, f2 = tokenizer.encode(changed)
    assert torch.equal(c2[:, :8], coarse[:, :8]) and torch.equal(f2[:, :8], fine[:, :8])
    assert torch.allclose(tokenizer(changed).reconstruction[:, :8], out.reconstruction[:, :8], atol=1e-5)
    predictor = KronosPredictor(4, 3, 32, 4, 64, 2).eval()
    h1, h2 = predictor.hidden(coarse, fine), predictor.hidden(c2, f2)
    assert torch.allclose(h1[:, :8], h2[:, :8], atol=1e-5) and not torch.allclose(h1[:, 8:], h2[:, 8:])


def test_fine_head_is_conditioned_on_the_coarse_token() -> None:
    torch.manual_seed(0)
    predictor = KronosPredictor(4, 3, 32, 4, 64, 2).eval()
    coarse, fine = torch.randint(0, 16, (1, 6)), torch.randint(0, 8, (1, 6))
    hidden = predictor.hidden(coarse, fine)
    a = predictor.fine_logits(hidden, torch.zeros(1, 6, dtype=torch.long))
    b = predictor.fine_logits(hidden, torch.full((1, 6), 9))
    assert not torch.allclose(a, b)
    loss, parts = predictor.loss(coarse, fine)
    assert float(loss.detach()) == pytest.approx(float(parts["coarse_ce"] + parts["fine_ce"]) / 2, rel=1e-5)


def test_sampling_temperature_and_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]])).repeat(4000, 1)
    generator = torch.Generator().manual_seed(0)
    assert torch.equal(sample_logits(logits, temperature=0), torch.zeros(4000, dtype=torch.long))
    assert torch.equal(sample_logits(logits, top_p=0.5, generator=generator), torch.zeros(4000, dtype=torch.long))
    nucleus = sample_logits(logits, top_p=0.85, generator=generator)
    assert set(nucleus.tolist()) == {0, 1} and (nucleus == 0).float().mean() == pytest.approx(2 / 3, abs=0.03)
    every = sample_logits(logits, generator=generator)
    assert (every >= 2).float().mean() == pytest.approx(0.1, abs=0.02)


def test_cached_generation_equals_rereading_the_whole_context() -> None:
    torch.manual_seed(0)
    predictor = KronosPredictor(4, 3, 32, 4, 64, 2).eval()
    coarse, fine = torch.randint(0, 16, (3, 9)), torch.randint(0, 8, (3, 9))
    cached = predictor.generate(coarse, fine, 6, temperature=0)
    windowed = predictor.generate(coarse, fine, 6, temperature=0, max_context=13)  # the last step reads 14 > 13: no cache
    full = predictor._generate_windowed(coarse, fine, 6, 0, 1.0, 100, None)
    assert torch.equal(cached[0], full[0]) and torch.equal(cached[1], full[1])
    assert windowed[0].shape == (3, 6)
    sampled = [predictor.generate(coarse, fine, 6, generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(sampled[0][0], sampled[1][0])


def test_future_timestamps_follow_the_timeframe() -> None:
    import pandas as pd

    from twinkle_timeseries.kronos.frames import future_index

    weekdays = pd.bdate_range("2024-01-01", "2024-01-05").to_numpy()  # Mon–Fri
    assert list(future_index(weekdays, 2, "1d")) == [pd.Timestamp("2024-01-08"), pd.Timestamp("2024-01-09")]
    every_day = pd.date_range("2024-01-01", "2024-01-07").to_numpy()  # crypto trades on Sundays
    assert future_index(every_day, 1, "1d")[0] == pd.Timestamp("2024-01-08")
    assert list(future_index(pd.DatetimeIndex(["2024-01-05"]).to_numpy(), 2, "1w")) == [
        pd.Timestamp("2024-01-12"), pd.Timestamp("2024-01-19")]
    hours = future_index(pd.DatetimeIndex(["2024-01-05 10:00"]).to_numpy(), 2, "1h")
    assert list(hours) == [pd.Timestamp("2024-01-05 11:00"), pd.Timestamp("2024-01-05 12:00")]


def test_timestamp_embeddings_condition_generation_cached_and_windowed_alike() -> None:
    from twinkle_timeseries.data import time_features

    torch.manual_seed(0)
    predictor = KronosPredictor(4, 3, 32, 4, 64, 2, time_embeddings=True).eval()
    with torch.no_grad():
        for table in predictor.time_emb.tables:
            table.weight.normal_(0, 1.0)  # strong enough to change greedy choices
    coarse, fine = torch.randint(0, 16, (3, 9)), torch.randint(0, 8, (3, 9))
    import pandas as pd

    hours = time_features(pd.date_range("2024-01-05 09:00", periods=15, freq="1h").to_numpy())
    days = time_features(pd.date_range("2024-03-11", periods=15, freq="1D").to_numpy())
    by_hour, by_day = (torch.from_numpy(s)[None].repeat(3, 1, 1) for s in (hours, days))
    cached = predictor.generate(coarse, fine, 6, temperature=0, stamps=by_hour)
    full = predictor._generate_windowed(coarse, fine, 6, 0, 1.0, 100, None, by_hour)
    assert torch.equal(cached[0], full[0]) and torch.equal(cached[1], full[1])  # the stamps line up in both paths
    assert not torch.equal(predictor.hidden(coarse, fine, stamps=by_hour[:, :9]),
                           predictor.hidden(coarse, fine, stamps=by_day[:, :9]))
    assert not torch.equal(cached[0], predictor.generate(coarse, fine, 6, temperature=0, stamps=by_day)[0]) or \
        not torch.equal(cached[1], predictor.generate(coarse, fine, 6, temperature=0, stamps=by_day)[1])


def test_timestamp_embeddings_default_to_intraday_bars_only() -> None:
    daily = KronosTiny()
    daily.configure_data(SPEC)
    assert daily.network.predictor.time_emb is None and not daily.uses_time_embeddings
    hourly = KronosTiny()
    hourly.configure_data(DataSpec("time_series_forecasting", (30, 5), target_shape=(10, 5), extra={"timeframe": "1h"}))
    assert hourly.network.predictor.time_emb is not None
    forced = KronosTiny(time_embeddings=True)
    forced.configure_data(SPEC)
    assert forced.network.predictor.time_emb is not None
