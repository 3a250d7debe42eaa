"""Kronos for K-lines (arXiv 2508.02739), written from the paper: BSQ tokenizer, hierarchical predictor.

``KronosModel`` is the Twinkle algorithm (two-stage training, ``predict``);
``KronosTiny``/``KronosMini``/``KronosSmall``/``KronosBase`` are its registered sizes.
"""

from twinkle_timeseries.kronos.frames import plot_forecast
from twinkle_timeseries.kronos.model import SIZES, KronosBase, KronosMini, KronosModel, KronosSmall, KronosTiny
from twinkle_timeseries.kronos.network import KronosNetwork
from twinkle_timeseries.kronos.predictor import KronosPredictor, sample_logits
from twinkle_timeseries.kronos.tokenizer import BinarySphericalQuantizer, KronosTokenizer

__all__ = ["SIZES", "BinarySphericalQuantizer", "KronosBase", "KronosMini", "KronosModel", "KronosNetwork",
           "KronosPredictor", "KronosSmall", "KronosTiny", "KronosTokenizer", "plot_forecast", "sample_logits"]
