"""``tabular-mlp``: a multilayer perceptron for tabular classification and regression."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.spec import DataSpec
from twinkle_core.types import PositiveInt, Probability

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class Affine(nn.Module):
    """``(x - shift) / scale`` (``inverse=False``) or ``x * scale + shift`` with fixed buffers."""

    def __init__(self, shift: list[float], scale: list[float], inverse: bool = False) -> None:
        """Store the statistics as buffers so they are saved and exported with the model."""
        super().__init__()
        self.register_buffer("shift", torch.tensor(shift, dtype=torch.float32))
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))
        self.inverse = inverse

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the fixed affine map."""
        return x * self.scale + self.shift if self.inverse else (x - self.shift) / self.scale


class TabularMLP(Algorithm):
    """An MLP over numeric features that standardises its inputs inside the model.

    The training split's feature means and standard deviations (from the data processor) become the first
    layer, so the trained and exported models take raw features. For regression the output is mapped back
    from standardised target units.
    """

    task = "tabular_classification"
    optimizer_defaults = {"lr": 1e-3, "weight_decay": 1e-4}

    def __init__(
        self,
        task: str | None = None,
        hidden_sizes: tuple[PositiveInt, ...] = (64, 32),
        dropout: Probability = 0.1,
        activation: Literal["relu", "gelu", "tanh"] = "relu",
    ) -> None:
        """Declare the architecture's hyperparameters.

        Args:
            task: ``tabular_classification`` (default) or ``tabular_regression``.
            hidden_sizes: widths of the hidden layers.
            dropout: dropout after each hidden layer.
            activation: the hidden activation.
        """
        super().__init__(task=task)
        self.hidden_sizes = tuple(hidden_sizes)
        self.dropout = dropout
        self.activation = activation

    def build_model(self, spec: DataSpec) -> nn.Module:
        """Standardise, then hidden layers, then one output per class (or one for regression)."""
        extra = spec.extra
        layers: list[nn.Module] = []
        if "feature_mean" in extra:
            layers.append(Affine(extra["feature_mean"], extra["feature_std"]))
        width = spec.num_features
        for hidden in self.hidden_sizes:
            layers += [nn.Linear(width, hidden), _ACTIVATIONS[self.activation](), nn.Dropout(self.dropout)]
            width = hidden
        layers.append(nn.Linear(width, spec.num_classes or 1))
        if spec.num_classes is None:
            layers += [nn.Flatten(0), Affine([extra.get("target_mean", 0.0)], [extra.get("target_std", 1.0)], True)]
        return nn.Sequential(*layers)
