"""``FinancialDataProcessor``: OHLCV bars at any URI → look-back/forecast windows, without look-ahead.

Input: one CSV or Parquet file, or a folder with one file per symbol (the file name is the symbol). Column
names match case-insensitively; the timestamp column is the first of ``timestamp``, ``datetime``, ``date``,
``time`` (or a datetime index). Bars are resampled to ``timeframe`` (open first, high max, low min, close
last, volume sum). With an adjusted-close column (``adj_close``, ``adj close``, ``adjusted_close``) prices
are split-adjusted by ``adj_close / close`` (volume by its inverse).

Checks — each a named error, or with ``repair=True`` a documented repair whose count is reported in the
run's data record: unsorted timestamps (sorted), duplicate timestamps (the last bar kept), NaN values (the bar
dropped), high < low (high and low swapped), negative volume (set to 0). A missing feature column, too few bars
for one window and an unknown timeframe are always errors.

Windows: ``lookback_window`` bars in, ``pred_len`` bars out. Each window is z-scored per feature with the mean
and deviation of its look-back part only (no look-ahead), clipped to ±``clip``. The split is chronological:
train before ``val_start``, validation before ``test_start``, test after; a window belongs to a split only if
all its bars do, so no bar is shared across splits. Without dates the timeline is cut at 70 % and 85 %.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from twinkle_core.data import (
    DataError,
    DataProcessor,
    DataSpec,
    EmptyDataError,
    MissingColumnError,
    MissingValueError,
    NonNumericError,
    PrepareContext,
    PreparedData,
    Reader,
    Samples,
)
from twinkle_core.types import PositiveFloat, PositiveInt

TIMEFRAMES = {"1m": "1min", "5m": "5min", "15m": "15min", "30m": "30min", "1h": "1h", "4h": "4h", "1d": "1D",
              "1w": "W-FRI"}
"""Supported timeframes and their pandas resampling rules."""

TIME_COLUMNS = ("timestamp", "datetime", "date", "time")
ADJ_COLUMNS = ("adj_close", "adj close", "adjusted_close", "adjclose")
OHLCV = ("open", "high", "low", "close", "volume")
AMOUNT_COLUMNS = ("amount", "turnover")
"""Traded value per bar (price × volume), Kronos's sixth feature: modelled as ``amount`` when every file has it."""
TIME_FEATURES = ("minute", "hour", "weekday", "day", "month")
"""The calendar fields of each bar's timestamp that Kronos embeds (its timestamp embeddings)."""


class OHLCVError(DataError):
    """Bars that break OHLCV rules: unsorted or duplicate timestamps, high < low, negative volume."""


def future_index(times: np.ndarray, steps: int, timeframe: str) -> pd.DatetimeIndex:
    """The ``steps`` timestamps after ``times`` at ``timeframe``.

    Daily bars step over weekends when the history has none (stock markets); weekly bars end on Fridays;
    intraday bars step by their length (sessions and holidays are not modelled).
    """
    last = pd.Timestamp(times[-1])
    if timeframe == "1d":
        weekends = (pd.DatetimeIndex(times).day_of_week >= 5).any()
        offset = pd.offsets.Day() if weekends else pd.offsets.BDay()
        return pd.date_range(last + offset, periods=steps, freq=offset)
    if timeframe == "1w":
        return pd.date_range(last + pd.offsets.Week(weekday=4), periods=steps, freq="W-FRI")
    step = pd.Timedelta(TIMEFRAMES[timeframe])
    return pd.DatetimeIndex([last + step * (i + 1) for i in range(steps)])


def window_stats(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and deviation of look-back bars; the deviation has 1e-5 added (as the Kronos reference
    normalises), so a flat feature becomes zeros."""
    return values.mean(axis=0), values.std(axis=0) + 1e-5


def time_features(times: np.ndarray) -> np.ndarray:
    """``(n, 5)`` int64 calendar fields of ``times`` (``TIME_FEATURES``): minute 0–59, hour 0–23, weekday
    0–6 (Monday 0), day of the month 1–31, month 1–12."""
    index = pd.DatetimeIndex(times)
    return np.stack([index.minute, index.hour, index.day_of_week, index.day, index.month], axis=1).astype(np.int64)


def normalise(values: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float) -> np.ndarray:
    """Bars z-scored with (look-back) statistics and clipped to ±``clip``, as float32."""
    return np.clip((values - mean) / std, -clip, clip).astype(np.float32)


@dataclass
class Series:
    """One symbol's cleaned bars (features in the processor's order), their timestamps and calendar fields."""

    symbol: str
    times: np.ndarray
    values: np.ndarray

    @property
    def stamps(self) -> np.ndarray:
        """``time_features`` of ``times`` (computed once)."""
        cached = self.__dict__.get("_stamps")
        if cached is None:
            cached = self.__dict__["_stamps"] = time_features(self.times)
        return cached


class WindowDataset(Dataset):
    """``(look-back, forecast, stamps)`` windows: the bars z-scored with look-back statistics (float32) and the
    calendar fields of every bar of the window (int64, ``lookback + pred_len`` × 5; see ``time_features``)."""

    def __init__(self, series: list[Series], windows: list[tuple[int, int]], lookback: int, pred_len: int,
                 clip: float) -> None:
        """``windows`` holds (series index, start bar) pairs."""
        self.series, self.windows, self.lookback, self.pred_len, self.clip = series, windows, lookback, pred_len, clip

    def __len__(self) -> int:
        """The number of windows."""
        return len(self.windows)

    def raw(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Window ``i`` in original units: (look-back bars, future bars)."""
        s, start = self.windows[i]
        values = self.series[s].values
        end = start + self.lookback
        return values[start:end], values[end : end + self.pred_len]

    def stats(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and deviation of window ``i``'s look-back bars, per feature."""
        return window_stats(self.raw(i)[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Look-back and future bars, both normalised with the look-back's statistics, and their stamps."""
        past, future = self.raw(i)
        mean, std = self.stats(i)
        s, start = self.windows[i]
        stamps = self.series[s].stamps[start : start + self.lookback + self.pred_len]
        return (torch.from_numpy(normalise(past, mean, std, self.clip)),
                torch.from_numpy(normalise(future, mean, std, self.clip)), torch.from_numpy(stamps))


class FinancialDataProcessor(DataProcessor):
    """OHLCV bars for time-series forecasting (see the module docstring)."""

    task = "time_series_forecasting"
    formats = ("csv", "parquet", "pq")

    def __init__(
        self,
        timeframe: str = "1d",
        features: list[str] | None = None,
        lookback_window: PositiveInt = 90,
        pred_len: PositiveInt = 10,
        val_start: str | None = None,
        test_start: str | None = None,
        repair: bool = False,
        adjust: bool = True,
        clip: PositiveFloat = 5.0,
        stride: PositiveInt = 1,
    ) -> None:
        """Configure bars, windows and split.

        Args:
            timeframe: one of ``1m 5m 15m 30m 1h 4h 1d 1w``.
            features: columns to model, in order (``close`` is always required). Default: open, high, low,
                close, volume, and ``amount`` (traded value, also read from a ``turnover`` column) when every
                file has it. Listed here, ``amount`` is derived for a file without it as volume × the mean of
                open, high, low and close (the Kronos reference's rule; the released models read six features).
            lookback_window: bars the model sees.
            pred_len: bars it forecasts.
            val_start: the ISO date the validation period starts.
            test_start: the ISO date the test period starts.
            repair: fix what can be fixed (and count it) instead of raising.
            adjust: split-adjust prices with an adjusted-close column when there is one.
            clip: the z-score clip.
            stride: bars between consecutive window starts.
        """
        super().__init__()
        if timeframe not in TIMEFRAMES:
            raise DataError(f"unknown timeframe '{timeframe}'; choose one of {', '.join(TIMEFRAMES)}")
        self.timeframe, self.auto_features = timeframe, features is None
        self.features = list(OHLCV) if features is None else [f.lower() for f in features]
        if "close" not in self.features:
            raise DataError("features must include 'close'")
        self.lookback_window, self.pred_len = int(lookback_window), int(pred_len)
        self.val_start, self.test_start = val_start, test_start
        self.repair, self.adjust, self.clip, self.stride = repair, adjust, clip, max(int(stride), 1)
        self.repairs: dict[str, int] = {}

    # --------------------------------------------------------------- reading
    def read(self, uri: str, reader: Reader | None = None) -> list[tuple[str, pd.DataFrame, str]]:
        """``(symbol, frame, file)`` for the file at ``uri`` or each file of the folder (each read once,
        fingerprinted by ``reader`` as it is read)."""
        reader = reader or Reader(uri)
        files = reader.files(".csv", ".parquet", ".pq") if reader.folder else reader.files()
        if not files:
            raise EmptyDataError(f"'{uri}' has no CSV or Parquet files (one file per symbol)")
        frames = []
        for file in files:
            with io.BytesIO(reader.read(file)) as handle:
                frame = pd.read_parquet(handle) if file.lower().endswith((".parquet", ".pq")) else pd.read_csv(handle)
            if frame.empty:
                raise EmptyDataError(f"'{file}' has no bars")
            frames.append((file.rsplit("/", 1)[-1].rsplit(".", 1)[0], frame, file))
        return frames

    def clean(self, symbol: str, frame: pd.DataFrame, source: str) -> Series:
        """Validate (or repair), adjust and resample one symbol's bars."""
        frame = frame.copy()
        frame.columns = [str(c).strip().lower() for c in frame.columns]
        time_column = next((c for c in TIME_COLUMNS if c in frame.columns), None)
        if time_column is not None:
            times = pd.to_datetime(frame.pop(time_column), errors="coerce", utc=False)
        elif isinstance(frame.index, pd.DatetimeIndex):
            times = pd.Series(frame.index)
        else:
            raise MissingColumnError(f"'{source}' has no timestamp column ({', '.join(TIME_COLUMNS)})")
        frame.index = pd.DatetimeIndex(times.to_numpy())
        amount = next((c for c in AMOUNT_COLUMNS if c in frame.columns), None)
        if amount is not None and amount != "amount" and "amount" not in frame.columns:
            frame = frame.rename(columns={amount: "amount"})
        derive = "amount" in self.features and "amount" not in frame.columns and {*OHLCV} <= set(frame.columns)
        missing = [f for f in self.features if f not in frame.columns and not (f == "amount" and derive)]
        if missing:
            raise MissingColumnError(f"'{source}' has no {', '.join(repr(m) for m in missing)} column; its columns "
                                     f"are {', '.join(frame.columns)}")
        adj = next((c for c in ADJ_COLUMNS if c in frame.columns), None)
        columns = [*OHLCV, "amount"]
        raw = frame[[c for c in columns if c in frame.columns] + ([adj] if adj else [])]
        data = raw.apply(pd.to_numeric, errors="coerce")
        text = data.isna() & raw.notna()  # a value that is there but is not a number
        if text.to_numpy().any():
            column = str(text.any().idxmax())
            row = int(np.flatnonzero(text[column].to_numpy())[0])
            raise NonNumericError(
                f"column '{column}' of '{source}' holds {raw[column].iloc[row]!r} in data row {row + 1} (bar "
                f"{frame.index[row]}), which is not a number; fix or drop that bar"
            )
        data = self._check(data, source)
        if derive:  # the traded value as the Kronos reference derives it
            data["amount"] = data["volume"] * data[["open", "high", "low", "close"]].mean(axis=1)
        if self.adjust and adj:
            factor = data[adj] / data["close"]
            for column in ("open", "high", "low", "close"):
                if column in data:
                    data[column] = data[column] * factor
            if "volume" in data:
                data["volume"] = data["volume"] / factor
        rules = {"open": "first", "high": "max", "low": "min", "close": "last", "volume": "sum", "amount": "sum"}
        kept = [c for c in columns if c in data]  # the traded value is unchanged by split adjustment
        bars = data[kept].resample(TIMEFRAMES[self.timeframe]).agg({c: rules[c] for c in kept}).dropna(subset=["close"])
        return Series(symbol, bars.index.to_numpy(), bars[self.features].to_numpy(dtype=np.float64))

    def _check(self, data: pd.DataFrame, source: str) -> pd.DataFrame:
        index = data.index
        if index.isna().any():
            raise OHLCVError(f"'{source}' has {int(index.isna().sum())} unreadable timestamps; fix them")
        if not index.is_monotonic_increasing:
            row = int(np.flatnonzero(np.diff(index.to_numpy()) < np.timedelta64(0))[0]) + 1
            self._fix_or_raise("unsorted", f"'{source}' timestamps are not sorted (data row {row + 1} is earlier "
                                           "than the one before)", 1)
            data = data.sort_index(kind="stable")
        duplicated = data.index.duplicated(keep="last")
        if duplicated.any():
            first = data.index[duplicated][0]
            self._fix_or_raise("duplicate_timestamps", f"'{source}' has {int(duplicated.sum())} duplicate timestamps "
                                                      f"(first {first})", int(duplicated.sum()))
            data = data[~duplicated]
        values = data.drop(columns=[c for c in data.columns if c in ADJ_COLUMNS])
        empty = [str(c) for c in values.columns if values[c].isna().all()]
        if empty:  # no repair helps: dropping its NaN bars would drop every bar
            raise MissingValueError(f"column {', '.join(repr(c) for c in empty)} of '{source}' holds no number in any "
                                    f"of its {len(values)} bars; fill it, or leave the column out of the file")
        nan_rows = values.isna().any(axis=1)
        if nan_rows.any():
            where = ", ".join(repr(str(c)) for c in values.columns if values[c].isna().any())
            self._fix_or_raise("nan_bars", f"'{source}' has {int(nan_rows.sum())} bars with NaN values in {where} "
                                           f"(first {data.index[nan_rows][0]})", int(nan_rows.sum()), MissingValueError)
            data = data[~nan_rows]
        if {"high", "low"} <= set(data.columns):
            bad = data["high"] < data["low"]
            if bad.any():
                self._fix_or_raise("high_below_low", f"'{source}' has {int(bad.sum())} bars with high < low (first "
                                                     f"{data.index[bad][0]})", int(bad.sum()))
                data.loc[bad, ["high", "low"]] = data.loc[bad, ["low", "high"]].to_numpy()
        if "volume" in data.columns:
            negative = data["volume"] < 0
            if negative.any():
                self._fix_or_raise("negative_volume", f"'{source}' has {int(negative.sum())} bars with negative "
                                                      f"volume (first {data.index[negative][0]})", int(negative.sum()))
                data.loc[negative, "volume"] = 0
        return data

    def _fix_or_raise(self, kind: str, message: str, count: int, error: type[DataError] = OHLCVError) -> None:
        if not self.repair:
            raise error(message + "; fix the data or pass repair=True to repair it (the count is reported)")
        self.repairs[kind] = self.repairs.get(kind, 0) + count

    # ----------------------------------------------------------- preparation
    def series(self, uri: str, reader: Reader | None = None) -> list[Series]:
        """Every symbol's cleaned bars (with default features, ``amount`` joins when every file has it)."""
        self.repairs = {}
        frames = self.read(uri, reader)
        if self.auto_features:
            has_amount = all(any(str(c).strip().lower() in AMOUNT_COLUMNS for c in frame.columns)
                             for _, frame, _ in frames)
            self.features = [*OHLCV, "amount"] if has_amount else list(OHLCV)
        return [self.clean(symbol, frame, file) for symbol, frame, file in frames]

    def boundaries(self, series: list[Series]) -> tuple[np.datetime64, np.datetime64]:
        """The validation and test start times (given, or at 70 % and 85 % of the overall timeline)."""
        times = np.sort(np.concatenate([s.times for s in series]))
        val = np.datetime64(pd.Timestamp(self.val_start)) if self.val_start else times[int(len(times) * 0.70)]
        test = np.datetime64(pd.Timestamp(self.test_start)) if self.test_start else times[int(len(times) * 0.85)]
        if not val < test:
            raise DataError(f"val_start ({val}) must be before test_start ({test})")
        return val, test

    def windows(self, series: list[Series], split: str) -> list[tuple[int, int]]:
        """(series, start) of every window lying entirely inside ``split`` (train, val or test)."""
        val, test = self.boundaries(series)
        span = self.lookback_window + self.pred_len
        low, high = {"train": (None, val), "val": (val, test), "test": (test, None)}[split]
        found = []
        for s, item in enumerate(series):
            for start in range(0, len(item.times) - span + 1, self.stride):
                first, last = item.times[start], item.times[start + span - 1]
                if (low is None or first >= low) and (high is None or last < high):
                    found.append((s, start))
        return found

    def split_datasets(self, uri: str) -> dict[str, WindowDataset]:
        """Train, validation and test windows of the data at ``uri`` (the test split is for evaluation)."""
        series = self.series(uri)
        return {split: WindowDataset(series, self.windows(series, split), self.lookback_window, self.pred_len,
                                     self.clip) for split in ("train", "val", "test")}

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Bars read as the run read its validation bars (its features, timeframe, look-back, horizon and clip, from
        ``spec``; checked, split-adjusted and resampled as for training), cut into every window that fits — a
        look-back and the ``pred_len`` bars after it, one every ``stride`` bars from each symbol's first — whatever
        their dates: the data given is the test set. The futures are the targets. Ids: symbol and the look-back's
        last bar. ``targets=False`` (``predict``): each symbol's latest look-back instead, its id the symbol.

        Raises:
            OHLCVError, DataError: as for training; no symbol long enough for one window (or one look-back).
        """
        self.features = list(spec.extra.get("features", self.features))
        self.timeframe = str(spec.extra.get("timeframe", self.timeframe))
        lookback, pred_len = int(spec.input_shape[0]), int(spec.target_shape[0])
        reader = Reader(uri)
        series = self.series(uri, reader)
        if not targets:  # predict: each symbol's latest look-back, to forecast the bars after it
            return self._latest(series, lookback, pred_len, float(spec.extra.get("clip", self.clip)), uri,
                                f"md5:{reader.manifest().md5}")
        span = lookback + pred_len
        windows = [(s, start) for s, item in enumerate(series)
                   for start in range(0, len(item.times) - span + 1, self.stride)]
        if not windows:
            longest = max(len(s.times) for s in series)
            raise DataError(f"'{uri}' has at most {longest} {self.timeframe} bars per symbol; one window needs {span} "
                            f"(the run's look-back {lookback} + pred_len {pred_len})")
        dataset = WindowDataset(series, windows, lookback, pred_len, float(spec.extra.get("clip", self.clip)))
        ids = [f"{series[s].symbol} {series[s].times[start + lookback - 1]}" for s, start in windows]
        details = {"symbols": len(series), "windows": len(windows), "repairs": self.repairs}
        return Samples(dataset, True, f"md5:{reader.manifest().md5}", uri, ids, details)

    def _latest(self, series: list[Series], lookback: int, pred_len: int, clip: float, uri: str,
                fingerprint: str) -> Samples:
        """Each symbol's last ``lookback`` bars, z-scored by themselves, with what a forecast of the ``pred_len``
        bars after them needs: items ``(look-back, stamps of the look-back and the future, future times as int64
        ns, mean, std)`` — as ``KronosModel.predict(df)`` builds them.

        Raises:
            DataError: a symbol with fewer bars than the look-back (named).
        """
        short = [f"{s.symbol} ({len(s.times)} bars)" for s in series if len(s.times) < lookback]
        if short:
            raise DataError(f"'{uri}': {', '.join(short[:5])} hold fewer {self.timeframe} bars than the run's look-back "
                            f"of {lookback}; give at least {lookback} bars per symbol")
        items = []
        for item in series:
            values = item.values[-lookback:]
            mean, std = window_stats(values)
            future = future_index(item.times, pred_len, self.timeframe).to_numpy()
            stamps = time_features(np.concatenate([item.times[-lookback:], future]))
            items.append((torch.from_numpy(normalise(values, mean, std, clip)), torch.from_numpy(stamps),
                          torch.from_numpy(future.astype("datetime64[ns]").astype(np.int64)),
                          torch.from_numpy(np.asarray(mean, dtype=np.float64)),
                          torch.from_numpy(np.asarray(std, dtype=np.float64))))
        return Samples(items, False, fingerprint, uri, [s.symbol for s in series], {"symbols": len(series)})

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read (each file once: parsed and fingerprinted from the same read), check, resample and window the
        bars; train and validation windows (test kept aside)."""
        reader = Reader(uri)
        series = self.series(uri, reader)
        span = self.lookback_window + self.pred_len
        longest = max(len(s.times) for s in series)
        if longest < span:
            raise DataError(f"'{uri}' has at most {longest} {self.timeframe} bars per symbol; one window needs "
                            f"{span} (lookback_window {self.lookback_window} + pred_len {self.pred_len})")
        train, val = self.windows(series, "train"), self.windows(series, "val")
        if not train or not val:
            raise DataError(f"'{uri}' leaves no {'training' if not train else 'validation'} window of {span} bars; "
                            "move val_start/test_start or shorten lookback_window")
        val_start, test_start = self.boundaries(series)
        spec = DataSpec(
            "time_series_forecasting", (self.lookback_window, len(self.features)),
            target_shape=(self.pred_len, len(self.features)),
            extra={"features": self.features, "timeframe": self.timeframe, "symbols": [s.symbol for s in series],
                   "val_start": str(val_start), "test_start": str(test_start), "clip": self.clip},
        )
        details = {"symbols": len(series), "bars": int(sum(len(s.times) for s in series)), "train_windows": len(train),
                   "val_windows": len(val), "test_windows": len(self.windows(series, "test")), "repairs": self.repairs}
        manifest = reader.manifest()
        size = int(sum(size for size, _ in manifest.files.values()))
        return PreparedData(WindowDataset(series, train, self.lookback_window, self.pred_len, self.clip),
                            WindowDataset(series, val, self.lookback_window, self.pred_len, self.clip),
                            spec, f"md5:{manifest.md5}", uri, size, details, manifest=manifest)
