"""Kronos for K-lines (arXiv 2508.02739), written from the paper: BSQ tokenizer, hierarchical predictor.

``KronosModel`` is the Twinkle algorithm (two-stage training, ``predict``);
``KronosTiny``/``KronosMini``/``KronosSmall``/``KronosBase`` are its registered sizes. Module names and arithmetic
are the reference implementation's (``shiyu-coder/Kronos``): ``KronosModel.from_pretrained`` and the ``weights=`` /
``tokenizer_weights=`` hyperparameters load its released folders, ``save_released`` writes them.
"""

from twinkle_timeseries.kronos.frames import plot_forecast
from twinkle_timeseries.kronos.model import SIZES, KronosBase, KronosMini, KronosModel, KronosSmall, KronosTiny
from twinkle_timeseries.kronos.network import KronosNetwork
from twinkle_timeseries.kronos.predictor import KronosPredictor, sample_logits
from twinkle_timeseries.kronos.released import save_released
from twinkle_timeseries.kronos.tokenizer import BinarySphericalQuantizer, KronosTokenizer

__all__ = ["SIZES", "BinarySphericalQuantizer", "KronosBase", "KronosMini", "KronosModel", "KronosNetwork",
           "KronosPredictor", "KronosSmall", "KronosTiny", "KronosTokenizer", "plot_forecast", "sample_logits",
           "save_released"]
