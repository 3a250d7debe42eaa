"""Kronos-tiny against persistence, drift and ridge on real daily bars, over several seeds.

Data (shipped inside PyPI packages, no downloads): bokeh_sampledata's AAPL, IBM, MSFT, GOOG and FB
(split-adjusted with adj_close) and arch's S&P 500 and NASDAQ indices — one CSV per symbol. Windows: look-back
30 daily bars, horizon 10; train before 2010-07-01, validation until 2011-07-01, test after (FB's bars all
fall in the test period). Each seed trains ``kronos-tiny`` through ``Trainer.fit`` (tokenizer stage, then
predictor stage) on one torch thread and forecasts every test window (mean of ``--samples`` sampled paths,
temperature ``--temperature``, top_p=0.9). Figures, on the test windows:

* token cross-entropy (mean of coarse and fine) against the uniform guess ``ln 2^bits``;
* tokenizer reconstruction MSE in z-units (all bits) of the test windows;
* MAE, MSE, MASE, directional accuracy, price IC / RankIC and cross-sectional RankIC of the closes — for
  Kronos and, side by side, the baselines (:mod:`twinkle_timeseries.evaluation`);
* from the fit itself: the validation MAE, MASE, persistence's MASE and direction that Kronos logs
  (z-units of each window's look-back; ``val_mase`` is the monitored metric).

Starting points:

* ``--weights DIR --tokenizer-weights DIR``: fine-tune a released Kronos (``Kronos-small`` and
  ``Kronos-Tokenizer-base`` folders, config.json + model.safetensors) instead of training from scratch; the bars
  then carry six features (``amount`` derived from volume and prices, as the reference does). No released weights
  are reachable from this machine, so this is for machines that have them.
* ``--self-pretrained``: pre-train kronos-tiny on the two indices only (SP500, NASDAQ), write it in the released
  format (``save_released``), then train on the five stocks both from scratch and from those weights (loaded with
  ``weights=``/``tokenizer_weights=``), and score both on the stocks' test windows.

Writes ``bench/results/kronos_quality.json`` (``kronos_quality_time_on.json`` / ``_off.json`` with
``--time-embeddings on|off``, ``kronos_quality_pretrained.json`` with ``--weights``,
``kronos_quality_self_pretrained.json`` with ``--self-pretrained``) and ``bench/results/kronos_forecast.png``
(one test window).

    python bench/kronos_quality.py [--seeds 3] [--epochs 8] [--tokenizer-epochs 5] [--samples 16]
                                   [--time-embeddings auto|on|off] [--weights DIR --tokenizer-weights DIR]
                                   [--self-pretrained]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from twinkle_core import Trainer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LOOKBACK, HORIZON, VAL_START, TEST_START = 30, 10, "2010-07-01", "2011-07-01"
STOCKS = ("AAPL", "IBM", "MSFT", "GOOG", "FB")


def write_bars(folder: Path, stocks_too: bool = True, indices_too: bool = True) -> Path:
    """One CSV per symbol: the bokeh stocks and arch's two indices."""
    from arch.data import nasdaq, sp500
    from bokeh_sampledata import stocks

    folder.mkdir(parents=True, exist_ok=True)
    for symbol in STOCKS if stocks_too else ():
        pd.DataFrame(getattr(stocks, symbol)).to_csv(folder / f"{symbol}.csv", index=False)
    for symbol, module in (("SP500", sp500), ("NASDAQ", nasdaq)) if indices_too else ():
        module.load().reset_index().to_csv(folder / f"{symbol}.csv", index=False)
    return folder


def evaluate_kronos(model, dataset, close: int, samples: int, temperature: float, seed: int,
                    batch: int = 256) -> dict:
    """Forecast closes, token cross-entropy and reconstruction MSE on every window of ``dataset``."""
    net = model.network.eval()
    closes, ces, mses, counts = [], [], [], []
    for start in range(0, len(dataset), batch):
        items = [dataset[i] for i in range(start, min(start + batch, len(dataset)))]
        x = torch.stack([item[0] for item in items])
        y = torch.stack([item[1] for item in items])
        stamps = torch.stack([item[2] for item in items])
        with torch.no_grad():
            bars = torch.cat([x, y], dim=1)
            _, recon = net.tokenizer.loss(bars)
            coarse, fine = net.tokenizer.encode(bars)
            ce, _ = net.predictor.loss(coarse, fine, stamps)
        z = model.forecast(x, HORIZON, T=temperature, top_p=0.9, sample_count=samples, seed=seed + start,
                           stamps=stamps)
        for j, i in enumerate(range(start, start + len(items))):
            mean, std = dataset.stats(i)
            closes.append(z[j, :, close].numpy() * std[close] + mean[close])
        ces.append(float(ce))
        mses.append(float(recon["recon_mse"]))
        counts.append(len(items))
    weights = np.array(counts, dtype=float)
    return {"closes": np.array(closes), "token_ce": float(np.average(ces, weights=weights)),
            "recon_mse": float(np.average(mses, weights=weights))}


def pretrain_on_indices(work: Path, args: argparse.Namespace) -> dict:
    """kronos-tiny trained on SP500 and NASDAQ alone, written in the released format; its weights hyperparameters."""
    from twinkle_timeseries.kronos import save_released

    indices = write_bars(work / "indices", stocks_too=False)
    trainer = Trainer("kronos-tiny", verbose=False, progress_bar=False,
                      hyperparams={"lookback_window": LOOKBACK, "pred_len": HORIZON, "val_start": VAL_START,
                                   "test_start": TEST_START, "max_epochs": args.epochs,
                                   "tokenizer_epochs": args.tokenizer_epochs, "batch_size": args.batch_size,
                                   "seed": 100})
    trainer.fit(data=str(indices))
    tokenizer, predictor = save_released(trainer.algorithm.network, str(work / "pretrained"))
    return {"weights": predictor, "tokenizer_weights": tokenizer}


def main() -> None:
    """Train and evaluate every seed, print a table and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--tokenizer-epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--time-embeddings", choices=("auto", "on", "off"), default="auto",
                        help="timestamp embeddings (auto: Kronos's default, off for daily bars)")
    parser.add_argument("--weights", help="a released predictor folder to fine-tune (with --tokenizer-weights)")
    parser.add_argument("--tokenizer-weights", help="its released tokenizer folder")
    parser.add_argument("--self-pretrained", action="store_true",
                        help="pre-train on the indices, then compare fine-tuning on the stocks with from-scratch")
    args = parser.parse_args()
    if bool(args.weights) != bool(args.tokenizer_weights):
        parser.error("--weights and --tokenizer-weights go together (a predictor only reads its own tokenizer's tokens)")
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="twinkle-kronos-bench-"))
    os.environ["TWINKLE_HOME"] = str(work / "home")
    from twinkle_timeseries import FinancialDataProcessor
    from twinkle_timeseries.evaluation import Windows, baseline_reports, evaluate
    from twinkle_timeseries.kronos import plot_forecast

    features = ["open", "high", "low", "close", "volume", "amount"] if args.weights else None
    starts: dict[str, dict] = {"scratch": {}}
    if args.weights:
        starts = {"released": {"weights": args.weights, "tokenizer_weights": args.tokenizer_weights}}
    elif args.self_pretrained:
        starts["self_pretrained"] = pretrain_on_indices(work, args)
    data = write_bars(work / "bars", indices_too=not args.self_pretrained)
    processor = FinancialDataProcessor(lookback_window=LOOKBACK, pred_len=HORIZON, val_start=VAL_START,
                                       test_start=TEST_START, stride=args.stride, features=features)
    splits = FinancialDataProcessor(lookback_window=LOOKBACK, pred_len=HORIZON, val_start=VAL_START,
                                    test_start=TEST_START, features=features).split_datasets(str(data))
    close = processor.features.index("close")
    train_w, test_w = Windows.from_dataset(splits["train"], close), Windows.from_dataset(splits["test"], close)
    baselines = {k: v.to_dict() for k, v in baseline_reports(train_w, test_w).items()}
    runs = []
    for (start_name, start_weights), seed in ((s, seed) for s in starts.items() for seed in range(args.seeds)):
        trainer = Trainer("kronos-tiny", data_processor=processor, verbose=False, progress_bar=False,
                          hyperparams={"max_epochs": args.epochs, "tokenizer_epochs": args.tokenizer_epochs,
                                       "batch_size": args.batch_size, "seed": seed, **start_weights,
                                       "time_embeddings": {"auto": None, "on": True, "off": False}[
                                           args.time_embeddings]})
        start = time.process_time()
        fit = trainer.fit(data=str(data))
        cpu_seconds = time.process_time() - start
        model = trainer.algorithm
        scored = evaluate_kronos(model, splits["test"], close, args.samples, args.temperature, seed)
        report = evaluate(test_w, scored["closes"]).to_dict()
        from_fit = {f"fit_{k}": fit.metrics.get(k) for k in ("val_mae", "val_mase", "val_persistence_mase",
                                                              "val_direction", "val_loss")}
        runs.append({"start": start_name, "seed": seed, "train_cpu_seconds": round(cpu_seconds, 1), "monitor": fit.monitor,
                     "best_val_mase": fit.best_metric, **from_fit,
                     "token_ce": scored["token_ce"], "uniform_ce": model.uniform_ce,
                     "recon_mse": scored["recon_mse"], **report,
                     "mae_vs_persistence": report["mae"] / baselines["persistence"]["mae"]})
        print(json.dumps(runs[-1]), flush=True)
        if seed == 0 and args.time_embeddings == "auto" and len(starts) == 1 and not args.weights:
            i = len(splits["test"]) // 2
            s, first = splits["test"].windows[i]
            series = splits["test"].series[s]
            times = pd.DatetimeIndex(series.times)
            frame = pd.DataFrame(series.values, index=times, columns=processor.features)
            history = frame.iloc[first : first + LOOKBACK]
            actual = frame.iloc[first + LOOKBACK : first + LOOKBACK + HORIZON]
            forecast = model.predict(history.reset_index(names="date"), HORIZON, T=args.temperature,
                                     sample_count=args.samples, seed=0)
            plot_forecast(history, forecast, str(RESULTS / "kronos_forecast.png"), actual=actual,
                          title=f"kronos-tiny, {series.symbol}, test window from {times[first].date()}")
    keys = ("train_cpu_seconds", "best_val_mase", "fit_val_mae", "fit_val_mase", "fit_val_persistence_mase",
            "fit_val_direction", "token_ce", "recon_mse", "mae", "mae_vs_persistence", "directional_accuracy",
            "price_ic", "price_rank_ic", "cross_sectional_rank_ic")
    means = {start: {k: statistics.fmean(r[k] for r in runs if r["start"] == start and r[k] is not None)
                     for k in keys} for start in starts}
    summary = means[next(iter(starts))]
    result = {
        "what": "kronos-tiny vs persistence/drift/ridge on daily bars (bokeh stocks + arch indices), test after "
                f"{TEST_START}, look-back {LOOKBACK}, horizon {HORIZON}",
        "settings": vars(args), "test_windows": len(splits["test"]), "train_windows": len(splits["train"]),
        "uniform_ce": runs[0]["uniform_ce"], "kronos_mean": summary, "kronos_mean_by_start": means,
        "kronos_per_seed": runs,
        "baselines": baselines,
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads()},
    }
    RESULTS.mkdir(exist_ok=True)
    name = "kronos_quality.json" if args.time_embeddings == "auto" else f"kronos_quality_time_{args.time_embeddings}.json"
    if args.weights or args.self_pretrained:
        name = "kronos_quality_pretrained.json" if args.weights else "kronos_quality_self_pretrained.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'':22} {'MAE':>7} {'×pers':>6} {'dir':>6} {'IC':>7} {'RankIC':>7} {'xRankIC':>8}")
    rows = {f"kronos:{start}": mean for start, mean in means.items()} | baselines
    for name, row in rows.items():
        ratio = row["mae"] / baselines["persistence"]["mae"]
        xs = row["cross_sectional_rank_ic"]
        print(f"{name[:22]:22} {row['mae']:7.3f} {ratio:6.3f} {row['directional_accuracy']:6.3f} {row['price_ic']:7.4f} "
              f"{row['price_rank_ic']:7.4f} {xs if xs is None else round(xs, 4)!s:>8}")
    print(f"kronos-tiny: token CE {summary['token_ce']:.3f} (uniform {runs[0]['uniform_ce']:.3f}), reconstruction "
          f"MSE {summary['recon_mse']:.4f} z², {summary['train_cpu_seconds']:.0f} CPU-s to train")
    print(f"from the fit (validation, z-units): MAE {summary['fit_val_mae']:.3f}, MASE {summary['fit_val_mase']:.3f} "
          f"(persistence {summary['fit_val_persistence_mase']:.3f}), direction {summary['fit_val_direction']:.3f}; "
          f"price IC {summary['price_ic']:.4f} vs ridge {baselines['ridge']['price_ic']:.4f}")


if __name__ == "__main__":
    main()
