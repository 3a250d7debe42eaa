"""``KronosModel``: Kronos as a Twinkle algorithm — two training stages in one ``Trainer.fit``.

Epochs ``0 … tokenizer_epochs-1`` train the tokenizer (reconstruction + BSQ loss); the remaining epochs train
the predictor on the frozen tokenizer's tokens (mean of the coarse and fine cross-entropies). Each stage has its
own learning-rate schedule (warm-up, then cosine) inside one optimizer; a part outside its stage gets no
gradient, so the optimizer leaves it alone. ``val_loss`` is the predictor's token cross-entropy and
``val_recon_mse`` tracks the tokenizer.

Validation also forecasts every look-back window (the mean of ``val_samples`` sampled paths, seeded, so the
figure is reproducible) and scores the close against the actual future, in each window's z-units:
``val_mae``, ``val_mase`` (MAE over the mean absolute one-bar change inside the look-backs, as Hyndman's
MASE), ``val_persistence_mase`` (the same for repeating the last close, side by side) and ``val_direction``
(how often the forecast moves the way the close did). ``monitor_metric`` (default ``val_mase``) picks the
best checkpoint. Intraday bars carry timestamp embeddings (minute, hour, weekday, day, month; the
``time_embeddings`` hyperparameter turns them on or off for any timeframe).

Training windows are ``lookback_window + pred_len`` bars z-scored with the look-back's statistics (the
``FinancialDataProcessor`` windows); forecasting samples tokens after a context and
decodes them (``KronosModel.predict``).

Subclass it like any algorithm:

```python
class MyKronos(KronosModel):
    def __init__(self, n_heads: int = 8, d_model: int = 256) -> None:
        super().__init__(n_heads=n_heads, d_model=d_model)
```
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
import torch
from torch import nn

from twinkle_core import Algorithm
from twinkle_core.data import DataSpec
from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_core.pretrained import Weights, read_config, read_weights
from twinkle_core.types import PositiveInt
from twinkle_timeseries.kronos.scores import ForecastScores
from twinkle_timeseries.kronos.network import KronosNetwork
from twinkle_timeseries.kronos.predictor import KronosPredictor
from twinkle_timeseries.kronos.released import FEATURES, released_sizes
from twinkle_timeseries.kronos.released import load as load_released
from twinkle_timeseries.kronos.tokenizer import KronosTokenizer

Stage = Literal["tokenizer", "predictor"]


class KronosModel(Algorithm):
    """Kronos (arXiv 2508.02739): a BSQ tokenizer for K-lines and a decoder-only predictor of its tokens.

    The defaults are the ``kronos-mini`` sizes; ``kronos-tiny``, ``kronos-small`` and ``kronos-base`` are
    subclasses with other defaults (see ``SIZES``).
    """

    task = "time_series_forecasting"
    optimizer_defaults: ClassVar[dict[str, Any]] = {"lr": 4e-4, "weight_decay": 0.05, "scheduler": "cosine"}

    def __init__(
        self,
        n_heads: int = 8,
        d_model: int = 256,
        n_layers: int = 4,
        ff_dim: int = 512,
        s1_bits: int = 10,
        s2_bits: int = 10,
        tokenizer_d_model: int = 128,
        tokenizer_heads: int = 4,
        tokenizer_ff_dim: int = 256,
        tokenizer_layers: int = 3,
        dropout: float = 0.1,
        max_context: int = 2048,
        tokenizer_epochs: int = 2,
        tokenizer_lr: float | None = None,
        warmup: float = 0.1,
        time_embeddings: bool | None = None,
        val_samples: PositiveInt = 4,
        monitor_metric: Literal["val_mase", "val_mae", "val_direction", "val_loss"] = "val_mase",
        weights: str | None = None,
        tokenizer_weights: str | None = None,
    ) -> None:
        """Sizes, context and the two training stages.

        Args:
            n_heads: the predictor transformer's attention heads.
            d_model: its width.
            n_layers: its blocks.
            ff_dim: its feed-forward width.
            s1_bits: bits of the coarse subtokens (a vocabulary of 2^bits).
            s2_bits: bits of the fine subtokens.
            tokenizer_d_model: the width of the tokenizer's encoder and decoder.
            tokenizer_heads: their attention heads.
            tokenizer_ff_dim: their feed-forward width.
            tokenizer_layers: their blocks (each).
            dropout: dropout in every block.
            max_context: the most bars the predictor sees (longer contexts keep their last bars).
            tokenizer_epochs: epochs of the tokenizer stage; the predictor trains for the rest. With 0 the
                tokenizer is kept as loaded (continuing a run on new data).
            tokenizer_lr: the tokenizer's peak learning rate (default: ``lr``).
            warmup: the share of each stage spent warming the learning rate up.
            time_embeddings: add the embedding of each bar's minute, hour, weekday, day and month to its tokens.
                Default: on for intraday bars, off for daily and weekly ones — on ten years of daily stock bars
                the calendar fields only let the predictor fit dates (``bench/kronos_quality.py``: price IC
                -0.01 with them, 0.04 without).
            val_samples: sampled paths averaged into each validation forecast.
            monitor_metric: the validation figure that picks the best checkpoint (and that early stopping and
                ``runs list`` show): ``val_mase``, ``val_mae``, ``val_direction`` (higher is better) or
                ``val_loss`` (token cross-entropy).
            weights: a released predictor (``Kronos-mini``/``small``/``base`` folder: ``config.json`` and
                ``model.safetensors``), or a ``.safetensors``/PyTorch file in the reference implementation's names;
                its config sets the predictor's sizes and turns timestamp embeddings on (unless
                ``time_embeddings=False``).
            tokenizer_weights: the released tokenizer the predictor was trained with (``Kronos-Tokenizer-base``,
                ``Kronos-Tokenizer-2k``); its config sets the tokenizer's sizes and the bars it reads (six:
                ``amount`` last). ``tokenizer_epochs=0`` keeps it frozen, more epochs fine-tune it first.
        """
        super().__init__(task="time_series_forecasting")
        self.n_heads, self.d_model, self.n_layers, self.ff_dim = n_heads, d_model, n_layers, ff_dim
        self.s1_bits, self.s2_bits = s1_bits, s2_bits
        self.tokenizer_d_model, self.tokenizer_heads = tokenizer_d_model, tokenizer_heads
        self.tokenizer_ff_dim, self.tokenizer_layers = tokenizer_ff_dim, tokenizer_layers
        self.dropout, self.max_context = dropout, max_context
        self.tokenizer_epochs, self.tokenizer_lr, self.warmup = tokenizer_epochs, tokenizer_lr, warmup
        self.time_embeddings, self.val_samples, self.monitor_metric = time_embeddings, val_samples, monitor_metric
        self.weights, self.tokenizer_weights = weights, tokenizer_weights
        self.uses_time_embeddings = False
        self._scores: dict[str, ForecastScores] = {}
        if tokenizer_epochs < 0:
            raise HyperparameterError(f"tokenizer_epochs must be 0 or more, not {tokenizer_epochs}")

    # ------------------------------------------------------------------ network
    def build_model(self, spec: DataSpec) -> KronosNetwork:
        """A tokenizer for the data's features and a predictor of its tokens."""
        if len(spec.input_shape) != 2:
            raise TwinkleError(f"{type(self).__name__} needs (bars, features) windows, got input shape "
                               f"{spec.input_shape}; use the ohlcv data processor (FinancialDataProcessor)")
        steps, features = spec.input_shape
        released = self._released_weights(features, spec)
        length = steps + (spec.target_shape[0] if spec.target_shape else 0)
        if length > self.max_context:
            raise HyperparameterError(f"windows of {length} bars exceed max_context={self.max_context}; shorten "
                                      "lookback_window or raise max_context")
        tokenizer = KronosTokenizer(features, self.tokenizer_d_model, self.tokenizer_heads, self.tokenizer_ff_dim,
                                    self.tokenizer_layers, self.tokenizer_layers, self.s1_bits, self.s2_bits,
                                    self.dropout)
        intraday = str(spec.extra.get("timeframe", "1d")) not in ("1d", "1w")
        default = intraday or released[0] is not None
        self.uses_time_embeddings = default if self.time_embeddings is None else bool(self.time_embeddings)
        predictor = KronosPredictor(self.s1_bits, self.s2_bits, self.d_model, self.n_heads, self.ff_dim,
                                    self.n_layers, self.dropout, self.uses_time_embeddings)
        if released[:2] != (None, None):
            self.weights_report = load_released(tokenizer, predictor, released[0], released[1])
            if released[2]:
                self.weights_report.notes.append("sizes from config.json: " + ", ".join(
                    f"{k}={v}" for k, v in sorted(released[2].items())))
        return KronosNetwork(tokenizer, predictor)

    def _released_weights(self, features: int,
                          spec: DataSpec) -> tuple[Weights | None, Weights | None, dict[str, Any]]:
        """Read ``weights`` and ``tokenizer_weights``; their configs set the sizes (checked against the data), which
        come back too."""
        found = tuple(read_weights(uri, what=what) if uri else None for uri, what in (
            (self.weights, "weights"), (self.tokenizer_weights, "tokenizer weights")))
        sizes = released_sizes(*found)
        reads = sizes.pop("features", None)
        if reads is not None and reads != features:
            names = FEATURES.get(reads)
            fix = f"features={names} to the ohlcv processor" if names else "bars with that many features"
            raise HyperparameterError(
                f"the tokenizer '{self.tokenizer_weights}' reads {reads} features per bar, the data has {features} "
                f"({', '.join(spec.extra.get('features', ()))}); pass {fix} (amount is derived as volume × mean price "
                "when a file lacks it)")
        for name, value in sizes.items():
            setattr(self, name, value)
        return found[0], found[1], sizes

    @classmethod
    def from_pretrained(cls, weights: str, tokenizer_weights: str, *, lookback_window: PositiveInt = 400,
                        pred_len: PositiveInt = 120, timeframe: str = "1d", **hyperparameters: Any) -> KronosModel:
        """A released Kronos ready to ``predict(df)`` without training (zero-shot), for bars of ``timeframe``.

        Both are folders (or files) at a path or URI the caller gives — never a hub name: nothing is downloaded.

        Args:
            weights: the predictor folder (``Kronos-small``, ...); tokenizer_weights: its tokenizer's folder.
            lookback_window: the bars each forecast reads (``predict(df)`` takes the last ones).
            pred_len: the default horizon of ``predict``.
            timeframe: the bars' timeframe (``1d``, ``1h``, ...): it spaces the forecast's timestamps.
            hyperparameters: any other ``KronosModel`` hyperparameter (``max_context``, ...).

        Raises:
            WeightsError, WeightsMismatchError: unreadable weights, or weights that do not fit each other.
            HyperparameterError: a tokenizer folder without its config, or one reading other bars than the released
                tokenizers do.
        """
        config = read_config(tokenizer_weights, "tokenizer weights")  # its tensors are read once, when built
        if not config:
            raise HyperparameterError(f"the tokenizer '{tokenizer_weights}' has no config.json to say what bars it "
                                      "reads; give the released folder, or fit with tokenizer_weights= on your bars")
        reads = int(released_sizes(None, Weights({}, "config", config, tokenizer_weights))["features"])
        features = FEATURES.get(reads)
        if features is None:
            raise HyperparameterError(f"the tokenizer '{tokenizer_weights}' reads {reads} features per bar; a released "
                                      f"tokenizer reads {' or '.join(map(str, FEATURES))} (its config.json's d_in)")
        model = cls(weights=weights, tokenizer_weights=tokenizer_weights, **hyperparameters)
        model.configure_data(DataSpec("time_series_forecasting", (lookback_window, len(features)),
                                      target_shape=(pred_len, len(features)),
                                      extra={"features": features, "timeframe": timeframe, "clip": 5.0}))
        return model

    @property
    def network(self) -> KronosNetwork:
        """The tokenizer and predictor (after ``configure_data``)."""
        if not isinstance(self.model, KronosNetwork):
            raise TwinkleError(f"{type(self).__name__} has seen no data yet; fit it or call configure_data(spec)")
        return self.model

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """Random bars as long as a training sequence (look-back plus forecast)."""
        if self.data_spec is None:
            return super().example_input(batch_size)
        steps, features = self.data_spec.input_shape
        pred = self.data_spec.target_shape[0] if self.data_spec.target_shape else 0
        return torch.randn(batch_size, steps + pred, features)

    def export_module(self) -> nn.Module:
        """Kronos forecasts by sampling tokens step by step; there is no single graph to export yet."""
        raise TwinkleError(f"{type(self).__name__} cannot be exported yet: it forecasts by sampling tokens step by "
                           "step; use model.predict(df, pred_len) in Python")

    # ------------------------------------------------------------------ stages
    @property
    def min_epochs(self) -> int:
        """Early stopping waits until the predictor has trained for one epoch."""
        return self.tokenizer_epochs + 1

    @property
    def stage(self) -> Stage:
        """Which part trains in the current epoch."""
        return "tokenizer" if self.current_epoch < self.tokenizer_epochs else "predictor"

    def on_fit_start(self) -> None:
        """Check that the predictor stage gets at least one epoch."""
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and 0 <= max_epochs <= self.tokenizer_epochs:
            raise HyperparameterError(
                f"{type(self).__name__} trains its tokenizer for tokenizer_epochs={self.tokenizer_epochs} epochs, then "
                f"the predictor: max_epochs ({max_epochs}) must be larger; raise max_epochs or lower tokenizer_epochs")

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Put the part that is not training in eval mode (no dropout; it gets no gradients either).

        Per batch, because Lightning puts the whole module back in train mode after a validation.
        """
        tokenizer_stage = self.stage == "tokenizer"
        self.network.tokenizer.train(tokenizer_stage)
        self.network.predictor.train(not tokenizer_stage)

    @staticmethod
    def _sequence(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The bars (look-back then future) of a batch, and their stamps when the batch has them."""
        x, y, *rest = batch
        return torch.cat([x, y], dim=1), (rest[0] if rest else None)

    def batch_loss(self, batch: Any) -> torch.Tensor:
        """The current stage's loss on (look-back, future[, stamps]) windows."""
        bars, stamps = self._sequence(batch)
        if self.stage == "tokenizer":
            loss, parts = self.network.tokenizer.loss(bars)
        else:
            coarse, fine = self.network.tokenizer.encode(bars)
            loss, parts = self.network.predictor.loss(coarse, fine, stamps)
        self.log_dict({f"train_{k}": v for k, v in parts.items()}, on_step=False, on_epoch=True,
                      batch_size=bars.shape[0])
        return loss

    def _evaluate(self, batch: Any, prefix: str) -> None:
        bars, stamps = self._sequence(batch)
        _, recon = self.network.tokenizer.loss(bars)
        coarse, fine = self.network.tokenizer.encode(bars)
        loss, parts = self.network.predictor.loss(coarse, fine, stamps)
        self.log(f"{prefix}_loss", loss, prog_bar=True, batch_size=bars.shape[0])
        self.log_dict({f"{prefix}_{k}": v for k, v in {**parts, **recon}.items()}, batch_size=bars.shape[0])
        x, y = batch[0], batch[1]
        scores = self._scores.setdefault(prefix, ForecastScores(self._close_index(), x.device))
        forecast = self.forecast(x, y.shape[1], T=1.0, top_p=0.9, sample_count=self.val_samples,
                                 seed=scores.batches, stamps=stamps)  # the same noise every epoch
        scores.add(x, y, forecast)

    def _log_scores(self, prefix: str) -> None:
        scores = self._scores.pop(prefix, None)
        if scores is None:
            return
        totals = scores.totals
        if self.trainer.world_size > 1:  # every rank scored its share of the windows
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        self.log_dict({f"{prefix}_{k}": v for k, v in ForecastScores.figures(totals).items()})

    def on_validation_epoch_start(self) -> None:
        """Start the epoch's forecast scores afresh."""
        self._scores.pop("val", None)

    def on_validation_epoch_end(self) -> None:
        """Log ``val_mae``, ``val_mase``, ``val_persistence_mase``, ``val_direction`` and ``val_ic`` over all
        windows."""
        self._log_scores("val")

    def on_test_epoch_end(self) -> None:
        """The same figures for the test split (``test_mae``, ...)."""
        self._log_scores("test")

    @property
    def evaluation_needs_outputs(self) -> bool:
        """Kronos scores its forecasts in its test pass (``test_mae``, ``test_mase``, ``test_persistence_mase``,
        ``test_direction``, ``test_ic``): no second, differently sampled, forecasting pass."""
        return False

    def evaluation_report(self, outputs: torch.Tensor, targets: torch.Tensor, spec: DataSpec) -> Any:
        """Nothing beyond the test figures: forecast error beside persistence's, direction and IC."""
        from twinkle_core import EvaluationReport

        return EvaluationReport()

    def _close_index(self) -> int:
        features = list(self.data_spec.extra.get("features", ())) if self.data_spec is not None else []
        return features.index("close") if "close" in features else 0

    @property
    def monitor(self) -> tuple[str, Literal["min", "max"]]:
        """``monitor_metric``, lower is better except for ``val_direction``."""
        return self.monitor_metric, "max" if self.monitor_metric == "val_direction" else "min"

    @property
    def uniform_ce(self) -> float:
        """The token cross-entropy of a uniform guess (mean of the coarse and fine vocabularies')."""
        return (self.s1_bits + self.s2_bits) / 2 * math.log(2)

    # ---------------------------------------------------------------- optimizer
    def configure_optimizers(self) -> Any:
        """One AdamW (or the chosen optimizer) with a parameter group and a schedule per stage."""
        s = self.optim
        groups = [{"params": list(self.network.tokenizer.parameters()), "lr": self.tokenizer_lr or s.lr},
                  {"params": list(self.network.predictor.parameters()), "lr": s.lr}]
        opt = self.build_optimizer(groups)
        if s.scheduler == "none":
            return opt
        total = int(self.trainer.estimated_stepping_batches)
        if self.trainer.max_epochs is not None and self.trainer.max_epochs > 0:
            max_epochs = max(int(self.trainer.max_epochs), self.tokenizer_epochs + 1)
            per_epoch = max(1, total // max_epochs)
            end = max_epochs * per_epoch
        else:  # max_steps alone ends the run (the plan's max_epochs -1): the stages split at a real epoch's end
            batches = self.trainer.num_training_batches
            per_epoch = (max(1, int(batches) // max(self.trainer.accumulate_grad_batches, 1))
                         if math.isfinite(batches) else max(1, total // (self.tokenizer_epochs + 1)))
            end = total
        boundary = self.tokenizer_epochs * per_epoch
        stages = [(0, boundary), (boundary, max(end, boundary + 1))]
        lambdas = [self._schedule(start, end, s.scheduler) for start, end in stages]
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambdas)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _schedule(self, start: int, end: int, kind: str) -> Any:
        length = max(end - start, 1)
        warm = max(1, int(self.warmup * length))

        def factor(step: int) -> float:
            t = step - start
            if t < 0 or t >= length:
                return 0.0 if t < 0 else 0.01
            if kind == "step":
                return 1.0 if t < 0.6 * length else 0.1 if t < 0.85 * length else 0.01
            if t < warm:
                return (t + 1) / warm
            return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * (t - warm) / max(length - warm, 1)))

        return factor

    # ---------------------------------------------------------------- forecasting
    def forecast(self, x: torch.Tensor, pred_len: int | None = None, T: float = 1.0, top_p: float = 0.9,
                 sample_count: int = 1, seed: int | None = None, stamps: torch.Tensor | None = None,
                 top_k: int = 0) -> torch.Tensor:
        """Forecast z-scored windows ``x`` (B, lookback, F): the mean of ``sample_count`` sampled paths.

        ``stamps`` (B, lookback + pred_len, 5) are the calendar fields of the look-back's and the future's bars
        (``twinkle_timeseries.data.time_features``); without them no timestamp embedding is added. ``top_k > 0``
        samples among the ``top_k`` most likely tokens instead of the ``top_p`` nucleus.
        Returns (B, pred_len, F) in the same z-units (``pred_len`` defaults to the trained horizon).
        """
        pred_len = pred_len or self._trained_pred_len()
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        was_training = self.network.training
        self.network.eval()
        try:
            stamps = stamps[:, : x.shape[1] + pred_len].to(self.device) if stamps is not None else None
            paths = self.network.forecast(x.to(self.device), pred_len, T, top_p, sample_count, self.max_context,
                                          generator, stamps, top_k)
        finally:
            self.network.train(was_training)
        return paths.mean(dim=1)

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Forecasts (z-units) of a batch of look-back windows (or ``(look-back, future[, stamps])`` windows); for
        ``Trainer.predict``'s latest look-backs (``(look-back, stamps, future times, mean, std)``), each symbol's
        future bars in prices, as ``predict(df, seed=batch_idx)`` forecasts them."""
        if isinstance(batch, (tuple, list)) and len(batch) == 5:
            return self._future_bars(*batch, seed=batch_idx)
        if isinstance(batch, (tuple, list)):
            return self.forecast(batch[0], stamps=batch[2] if len(batch) > 2 else None)
        return self.forecast(batch)

    def _future_bars(self, x: torch.Tensor, stamps: torch.Tensor, future: torch.Tensor, mean: torch.Tensor,
                     std: torch.Tensor, seed: int) -> list[list[dict[str, Any]]]:
        """The bars at ``future`` times after each look-back, in prices, each with its time (as ``predict(df)``)."""
        spec = self.data_spec
        assert spec is not None
        z = self.forecast(x, future.shape[1], stamps=stamps, seed=seed).cpu().double()
        prices = z * std.cpu().double()[:, None, :] + mean.cpu().double()[:, None, :]
        features = list(spec.extra.get("features", ()))
        return [[{"time": str(np.datetime64(int(when), "ns")), **dict(zip(features, bar))}
                 for when, bar in zip(times.tolist(), values.tolist())] for times, values in zip(future, prices)]

    def prediction_rows(self, outputs: Any, spec: DataSpec) -> list[Any]:
        """Each symbol's future bars (a list of rows: ``time`` and one column per feature)."""
        return list(outputs)

    def _trained_pred_len(self) -> int:
        spec = self.data_spec
        return int(spec.target_shape[0]) if spec is not None and spec.target_shape else 10

    def predict(self, df: pd.DataFrame, pred_len: int | None = None, T: float = 1.0, top_p: float = 0.9,
                sample_count: int = 1, lookback: int | None = None, seed: int | None = None,
                top_k: int = 0) -> pd.DataFrame:
        """Forecast the next ``pred_len`` bars after the bars of ``df``.

        ``df`` holds the trained features (case-insensitive columns) and a timestamp column or index; it is
        checked, split-adjusted and resampled like the training data. The last ``lookback`` bars (default:
        the trained look-back) are z-scored by themselves, ``sample_count`` token paths are sampled with
        temperature ``T`` and nucleus ``top_p`` (or the ``top_k`` most likely tokens), and their mean is mapped back
        to prices. With a released model and the same ``seed``, the forecast is the reference implementation's
        ``KronosPredictor.predict`` (seeded with ``torch.manual_seed``) for the same bars.

        Returns:
            A DataFrame indexed by the future timestamps (business days for daily stock bars), one column per
            feature.
        """
        from twinkle_timeseries.data import future_index, normalise, time_features, window_stats

        spec = self.data_spec
        if spec is None or self.model is None:
            raise TwinkleError(f"{type(self).__name__} has seen no data yet; fit it before predict(df)")
        processor = self._processor(spec)
        series = processor.clean("predict", df, "predict(df)")
        lookback = int(lookback or spec.input_shape[0])
        values = series.values[-lookback:]
        if len(values) < 2:
            raise TwinkleError(f"predict(df) needs at least 2 bars after cleaning, got {len(values)}")
        mean, std = window_stats(values)
        clip = float(spec.extra.get("clip", 5.0))
        x = torch.from_numpy(normalise(values, mean, std, clip))[None]
        pred_len = int(pred_len or self._trained_pred_len())
        index = future_index(series.times, pred_len, processor.timeframe)
        times = np.concatenate([series.times[-len(values):], index.to_numpy()])
        stamps = torch.from_numpy(time_features(times))[None]
        z = self.forecast(x, pred_len, T, top_p, sample_count, seed, stamps, top_k)[0].cpu().numpy().astype(np.float64)
        return pd.DataFrame(z * std + mean, index=index, columns=processor.features)

    @staticmethod
    def _processor(spec: DataSpec) -> Any:
        from twinkle_timeseries.data import OHLCV, FinancialDataProcessor

        return FinancialDataProcessor(timeframe=str(spec.extra.get("timeframe", "1d")),
                                      features=list(spec.extra.get("features", OHLCV)),
                                      lookback_window=int(spec.input_shape[0]))


SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"n_heads": 4, "d_model": 64, "n_layers": 2, "ff_dim": 128, "s1_bits": 6, "s2_bits": 6,
             "tokenizer_d_model": 48, "tokenizer_heads": 4, "tokenizer_ff_dim": 96, "tokenizer_layers": 2,
             "dropout": 0.0, "max_context": 512, "tokenizer_epochs": 5, "tokenizer_lr": 4e-3},
    "mini": {},
    "small": {"n_heads": 8, "d_model": 512, "n_layers": 8, "ff_dim": 1024, "tokenizer_d_model": 256,
              "tokenizer_ff_dim": 512, "max_context": 512},
    "base": {"n_heads": 16, "d_model": 832, "n_layers": 12, "ff_dim": 2048, "tokenizer_d_model": 256,
             "tokenizer_ff_dim": 512, "max_context": 512},
}
"""Defaults of each registered size (``mini`` is ``KronosModel``'s own)."""

OPTIMIZER_DEFAULTS: dict[str, dict[str, Any]] = {"tiny": {"lr": 2e-3}}
"""Optimizer defaults that differ from ``KronosModel``'s, per size (small models take larger steps)."""


def _sized(size: str) -> type[KronosModel]:
    """A subclass whose ``__init__`` defaults are the ``size``'s (so they show in hyperparameter listings)."""
    import inspect

    base = inspect.signature(KronosModel.__init__)
    overrides = SIZES[size]
    params = [p.replace(default=overrides.get(p.name, p.default)) for p in base.parameters.values()]

    def __init__(self: KronosModel, **kwargs: Any) -> None:
        KronosModel.__init__(self, **{**overrides, **kwargs})

    __init__.__signature__ = base.replace(parameters=params)  # type: ignore[attr-defined]
    __init__.__annotations__ = dict(KronosModel.__init__.__annotations__)
    __init__.__doc__ = KronosModel.__init__.__doc__
    name = f"Kronos{size.capitalize()}"
    return type(name, (KronosModel,), {
        "__init__": __init__, "__module__": __name__,
        "optimizer_defaults": {**KronosModel.optimizer_defaults, **OPTIMIZER_DEFAULTS.get(size, {})},
        "__doc__": f"``kronos-{size}``: ``KronosModel`` with the {size} sizes."})


KronosTiny = _sized("tiny")
KronosMini = _sized("mini")
KronosSmall = _sized("small")
KronosBase = _sized("base")
