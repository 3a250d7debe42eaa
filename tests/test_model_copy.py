"""A trained model is copied for export even when it holds tensors computed from its parameters (weight_norm's
``weight`` after a training step is not a graph leaf, and ``copy.deepcopy`` refuses those)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from torch import nn

from twinkle_core import Trainer
from twinkle_core.algorithms.tabular_mlp import TabularMLP


class WeightNormMLP(TabularMLP):
    """The tabular MLP with a weight-normalised output layer (old-style ``torch.nn.utils.weight_norm``)."""

    def build_model(self, spec):  # noqa: ANN001, ANN201
        """The MLP, its last Linear weight-normalised."""
        model = super().build_model(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # weight_norm is deprecated in favour of the parametrization
            for i, layer in enumerate(model):
                if isinstance(layer, nn.Linear):
                    last = i
            model[last] = nn.utils.weight_norm(model[last])
        return model


def test_a_model_that_ended_on_a_training_step_exports(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    pd.DataFrame(x, columns=list("abcd")).assign(label=(x[:, 0] > 0).astype(int)).to_csv(tmp_path / "t.csv", index=False)
    trainer = Trainer(WeightNormMLP, task="tabular_classification", home=str(tmp_path / "home"), verbose=False,
                      hyperparams={"max_steps": 3, "batch_size": 16, "progress_bar": False})
    result = trainer.fit(data=str(tmp_path / "t.csv"))  # stops mid-epoch: the last forward built a graph
    assert result.status == "finished"
    model, *_ = trainer.model_for_export()
    assert model is not trainer.algorithm
    exported = trainer.export(format="onnx")
    assert exported.max_abs_diff < 1e-4
