"""Released Kronos folders (config.json + model.safetensors, as the reference implementation saves them) load into
Twinkle's Kronos name for name and forecast exactly as the reference does.

The reference implementation is ``shiyu-coder/Kronos`` as ``kronos-finance`` vendors it (PyPI, MIT; in the test extra).
Each test writes its own small released-format folders: nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from twinkle_core import Trainer
from twinkle_core.errors import HyperparameterError
from twinkle_core.pretrained import WeightsError
from twinkle_timeseries import FinancialDataProcessor, KronosModel

import kronos_finance._vendor.kronos_model as reference  # the reference implementation (test extra)

BARS = ["open", "high", "low", "close", "volume"]


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> tuple[Path, Path, object, object]:
    """A tokenizer (6 features, 4+4 bits, 2 blocks each side) and a predictor (2 blocks), random but seeded, saved by
    the reference's own ``save_pretrained``."""
    torch.manual_seed(0)
    tokenizer = reference.KronosTokenizer(
        d_in=6, d_model=32, n_heads=4, ff_dim=64, n_enc_layers=3, n_dec_layers=3, ffn_dropout_p=0.0,
        attn_dropout_p=0.0, resid_dropout_p=0.0, s1_bits=4, s2_bits=4, beta=0.05, gamma0=1.0, gamma=1.1, zeta=0.05,
        group_size=4).eval()
    predictor = reference.Kronos(s1_bits=4, s2_bits=4, n_layers=2, d_model=32, n_heads=4, ff_dim=64, ffn_dropout_p=0.0,
                                 attn_dropout_p=0.0, resid_dropout_p=0.0, token_dropout_p=0.0, learn_te=True).eval()
    folder = tmp_path_factory.mktemp("released")
    tokenizer.save_pretrained(folder / "Kronos-Tokenizer-test")
    predictor.save_pretrained(folder / "Kronos-test")
    return folder / "Kronos-Tokenizer-test", folder / "Kronos-test", tokenizer, predictor


@pytest.fixture(scope="module")
def history() -> pd.DataFrame:
    """AAPL's last 80 daily bars of bokeh_sampledata (no amount column: both sides derive it)."""
    from bokeh_sampledata.stocks import AAPL

    frame = pd.DataFrame(AAPL)
    frame["date"] = pd.to_datetime(frame["date"])
    return frame[["date", *BARS]].iloc[-80:].reset_index(drop=True)


def test_a_released_pair_loads_name_for_name_and_computes_what_the_reference_computes(released) -> None:
    """Every tensor of Twinkle's Kronos comes from the folders under its own name (only the reference's constant
    buffers are left over), the report says so, and tokens, reconstructions and logits equal the reference's."""
    tokenizer_dir, predictor_dir, ref_tokenizer, ref_predictor = released
    model = KronosModel.from_pretrained(str(predictor_dir), str(tokenizer_dir), lookback_window=40, pred_len=5)
    report, network = model.weights_report, model.network.eval()
    assert set(report.matched) == set(network.state_dict()) and not report.renamed and not report.fresh
    assert report.ignored and all(name.endswith(("rotary.inv_freq", "bsq.basis", "bsq.group_basis"))
                                  for name in report.ignored)
    assert model.d_model == 32 and model.n_layers == 2 and model.tokenizer_layers == 2 and model.s1_bits == 4
    assert model.uses_time_embeddings  # the released predictors were trained with timestamps

    torch.manual_seed(1)
    bars, stamps = torch.randn(3, 24, 6), torch.randint(0, 7, (3, 24, 5))
    with torch.no_grad():
        coarse, fine = ref_tokenizer.encode(bars, half=True)
        assert [torch.equal(a, b) for a, b in zip((coarse, fine), network.tokenizer.encode(bars))] == [True, True]
        (ref_coarse_only, ref_full), *_ = ref_tokenizer(bars)
        out = network.tokenizer(bars)
        assert (out.reconstruction - ref_full).abs().max() <= 1e-5
        assert (out.coarse_reconstruction - ref_coarse_only).abs().max() <= 1e-5
        assert (network.tokenizer.decode(coarse, fine) - ref_tokenizer.decode([coarse, fine], half=True)).abs().max() <= 1e-5
        ref_predictor.train()  # whole sequences: the reference is causal while training (its dropouts are 0 here) ...
        ref_logits = ref_predictor(coarse, fine, stamps.float(), use_teacher_forcing=True, s1_targets=coarse)
        ref_predictor.eval()  # ... and drops that mask in eval mode, which Twinkle keeps (no peeking in validation)
        logits = network.predictor(coarse, fine, coarse, stamps)
        assert max((a - b).abs().max() for a, b in zip(logits, ref_logits)) <= 1e-5
        ref_s1, context = ref_predictor.decode_s1(coarse, fine, stamps.float())
        nxt = torch.randint(0, 16, (3, 1))
        hidden = network.predictor.hidden(coarse, fine, stamps=stamps)
        assert (network.predictor.fine_logits(hidden, nxt)[:, -1] - ref_predictor.decode_s2(context, nxt)[:, -1]).abs().max() <= 1e-5


@pytest.mark.parametrize(("sample_count", "top_k", "top_p"), [(3, 0, 0.9), (2, 5, 1.0)])
def test_predict_gives_the_reference_forecast_for_the_same_seed(released, history, sample_count, top_k, top_p) -> None:
    """``predict(df)`` of the loaded model equals the reference ``KronosPredictor.predict`` seeded the same way, with
    nucleus and with top-k sampling, averaged over several paths (relative |Δ| ≤ 1e-5)."""
    tokenizer_dir, predictor_dir, ref_tokenizer, ref_predictor = released
    model = KronosModel.from_pretrained(str(predictor_dir), str(tokenizer_dir), lookback_window=80, pred_len=8,
                                        max_context=512)
    mine = model.predict(history, sample_count=sample_count, top_k=top_k, top_p=top_p, seed=7)
    assert list(mine.columns) == [*BARS, "amount"] and len(mine) == 8
    torch.manual_seed(7)
    theirs = reference.KronosPredictor(ref_predictor, ref_tokenizer, device="cpu", max_context=512).predict(
        history[BARS], history["date"], pd.Series(mine.index), pred_len=8, T=1.0, top_k=top_k, top_p=top_p,
        sample_count=sample_count, verbose=False)
    np.testing.assert_allclose(mine.to_numpy(), theirs[mine.columns].to_numpy(), rtol=1e-5)
    assert not mine.equals(model.predict(history, sample_count=sample_count, top_k=top_k, top_p=top_p, seed=8))


def test_a_context_longer_than_max_context_forecasts_as_the_reference_does(released, history) -> None:
    """Past ``max_context`` both re-read the last bars with positions counted from the window's start."""
    tokenizer_dir, predictor_dir, ref_tokenizer, ref_predictor = released
    model = KronosModel.from_pretrained(str(predictor_dir), str(tokenizer_dir), lookback_window=30, pred_len=6,
                                        max_context=40)
    mine = model.predict(history.iloc[-60:], lookback=60, sample_count=2, seed=3)
    torch.manual_seed(3)
    theirs = reference.KronosPredictor(ref_predictor, ref_tokenizer, device="cpu", max_context=40).predict(
        history[BARS].iloc[-60:], history["date"].iloc[-60:], pd.Series(mine.index), pred_len=6, sample_count=2,
        verbose=False)
    np.testing.assert_allclose(mine.to_numpy(), theirs[mine.columns].to_numpy(), rtol=1e-5)


def test_the_tokenizer_stays_frozen_or_is_fine_tuned_by_choice(released, history, tmp_path) -> None:
    """Fitting from released weights starts from them: ``tokenizer_epochs=0`` keeps the tokenizer exactly as released
    while the predictor trains; one tokenizer epoch changes it. The run stores the load report."""
    tokenizer_dir, predictor_dir, ref_tokenizer, ref_predictor = released
    from bokeh_sampledata.stocks import IBM

    frame = pd.DataFrame(IBM)[["date", *BARS]].iloc[-700:]
    frame.to_csv(tmp_path / "IBM.csv", index=False)
    windows = {"lookback_window": 30, "pred_len": 10, "stride": 10, "features": [*BARS, "amount"], "seed": 0,
               "weights": str(predictor_dir), "tokenizer_weights": str(tokenizer_dir), "val_samples": 1}
    released_tokenizer = {k: v.clone() for k, v in ref_tokenizer.state_dict().items()}
    for epochs, changes in ((0, False), (1, True)):
        trainer = Trainer("kronos-tiny", home=str(tmp_path / f"home{epochs}"), verbose=False, progress_bar=False,
                          hyperparams={**windows, "tokenizer_epochs": epochs, "max_epochs": epochs + 1})
        result = trainer.fit(data=str(tmp_path / "IBM.csv"))
        assert result.status == "finished"
        net = trainer.algorithm.network
        same = all(torch.equal(tensor, released_tokenizer[name]) for name, tensor in net.tokenizer.state_dict().items())
        assert same is not changes
        assert not torch.equal(net.predictor.embedding.emb_s1.weight, ref_predictor.embedding.emb_s1.weight)
        record = Path(result.run_dir) / "weights.json"
        assert '"predictor.embedding.emb_s1.weight"' in record.read_text()


def test_weights_that_do_not_fit_the_data_or_each_other_are_named_errors(released, tmp_path) -> None:
    """A six-feature tokenizer on five-feature bars, a predictor of other token sizes, a folder without its config:
    each is refused before training, naming the fix."""
    tokenizer_dir, predictor_dir, *_ = released
    from twinkle_core.data import DataSpec

    five = DataSpec("time_series_forecasting", (30, 5), target_shape=(10, 5), extra={"features": BARS})
    with pytest.raises(HyperparameterError, match=r"reads 6 features per bar, the data has 5.*'amount'"):
        KronosModel(weights=str(predictor_dir), tokenizer_weights=str(tokenizer_dir)).configure_data(five)
    other = reference.Kronos(s1_bits=3, s2_bits=3, n_layers=1, d_model=32, n_heads=4, ff_dim=64, ffn_dropout_p=0.0,
                             attn_dropout_p=0.0, resid_dropout_p=0.0, token_dropout_p=0.0, learn_te=True)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(HyperparameterError, match="released together"):
        KronosModel.from_pretrained(str(tmp_path / "other"), str(tokenizer_dir))
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text('{"d_model": 32}')
    (bare / "model.safetensors").write_bytes((tokenizer_dir / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match="config.json lacks d_in"):
        KronosModel.from_pretrained(str(predictor_dir), str(bare))


def test_amount_is_derived_as_the_reference_derives_it(tmp_path) -> None:
    """Asked for ``amount``, a file without it gets volume × mean(open, high, low, close) per bar."""
    bars = pd.DataFrame({"date": pd.bdate_range("2024-01-01", periods=4), "open": [1.0, 2, 3, 4],
                         "high": [2.0, 3, 4, 5], "low": [0.5, 1, 2, 3], "close": [1.5, 2, 3, 4],
                         "volume": [10.0, 20, 30, 40]})
    series = FinancialDataProcessor(features=[*BARS, "amount"], lookback_window=2, pred_len=1).clean("X", bars, "x")
    np.testing.assert_allclose(series.values[:, 5], bars["volume"] * bars[["open", "high", "low", "close"]].mean(axis=1))


def test_a_twinkle_kronos_saved_in_the_released_format_is_what_the_reference_loads(history, tmp_path) -> None:
    """``save_released`` writes folders the reference's ``from_pretrained`` reads, and Twinkle's ``weights=`` reads
    back; a predictor trained without timestamp embeddings forecasts the same in both (its tables written as zeros)."""
    from twinkle_core.data import DataSpec
    from twinkle_timeseries.kronos import KronosTiny, save_released

    torch.manual_seed(4)
    model = KronosTiny()
    model.configure_data(DataSpec("time_series_forecasting", (40, 6), target_shape=(5, 6),
                                  extra={"features": [*BARS, "amount"], "timeframe": "1d"}))
    assert not model.uses_time_embeddings
    tokenizer_dir, predictor_dir = save_released(model.network, str(tmp_path / "tiny"))
    ref_tokenizer = reference.KronosTokenizer.from_pretrained(tokenizer_dir, local_files_only=True).eval()
    ref_predictor = reference.Kronos.from_pretrained(predictor_dir, local_files_only=True).eval()
    mine = model.predict(history, lookback=40, sample_count=2, seed=5)
    torch.manual_seed(5)
    theirs = reference.KronosPredictor(ref_predictor, ref_tokenizer, device="cpu", max_context=512).predict(
        history[BARS].iloc[-40:], history["date"].iloc[-40:], pd.Series(mine.index), pred_len=5, sample_count=2,
        verbose=False)
    np.testing.assert_allclose(mine.to_numpy(), theirs[mine.columns].to_numpy(), rtol=1e-5)
    again = KronosModel.from_pretrained(predictor_dir, tokenizer_dir, lookback_window=40, pred_len=5, max_context=512)
    np.testing.assert_allclose(again.predict(history, lookback=40, sample_count=2, seed=5).to_numpy(), mine.to_numpy(),
                               rtol=1e-5)
