"""What ``evaluate`` reports about a trained model on a test set, per task kind: an ``EvaluationReport`` of
figures, tables and plots. ``Algorithm.evaluation_report`` picks one for its task; core's kinds are here
(classification, regression), computed with torchmetrics; a plugin's algorithm returns its own
``EvaluationReport`` for other kinds. (Prediction rows are ``twinkle_core.predictions``'.)
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from twinkle_core.errors import TwinkleError


@dataclass
class EvaluationReport:
    """One evaluation's results.

    Attributes:
        metrics: named figures (``accuracy``, ``macro_f1``, ``mae``, ...), plain floats.
        tables: JSON-ready tables (``per_class``: one row per class; ``confusion_matrix``: counts, rows the true
            class, columns the predicted one).
        plots: PNG images by file name (``confusion_matrix.png``).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    plots: dict[str, bytes] = field(default_factory=dict)


def classification_report(outputs: torch.Tensor, targets: torch.Tensor, class_names: Sequence[str]
                          ) -> EvaluationReport:
    """Accuracy, per-class precision, recall, F1 and support, their macro means, and the confusion matrix (JSON
    and PNG) of a classifier's ``outputs`` (logits or probabilities, ``N × C``) against class indices.

    Raises:
        TwinkleError: outputs whose class count differs from ``class_names``.
    """
    from torchmetrics.functional.classification import (multiclass_confusion_matrix, multiclass_f1_score,
                                                        multiclass_precision, multiclass_recall)

    classes = len(class_names)
    if outputs.dim() != 2 or outputs.shape[1] != classes:
        raise TwinkleError(f"the model gives {tuple(outputs.shape)} outputs for {classes} classes "
                           f"({', '.join(class_names[:5])}); expected N × {classes}")
    predicted = outputs.argmax(dim=1)
    targets = targets.long()
    kwargs = {"num_classes": classes, "average": "none", "zero_division": 0}
    precision = multiclass_precision(predicted, targets, **kwargs)
    recall = multiclass_recall(predicted, targets, **kwargs)
    f1 = multiclass_f1_score(predicted, targets, **kwargs)
    confusion = multiclass_confusion_matrix(predicted, targets, num_classes=classes)
    support = confusion.sum(dim=1)
    per_class = [{"class": str(name), "precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
                 for name, p, r, f, s in zip(class_names, precision, recall, f1, support)]
    present = support > 0  # macro means over the classes the test set holds
    metrics = {"accuracy": float((predicted == targets).float().mean()) if len(targets) else 0.0,
               "macro_precision": float(precision[present].mean()) if present.any() else 0.0,
               "macro_recall": float(recall[present].mean()) if present.any() else 0.0,
               "macro_f1": float(f1[present].mean()) if present.any() else 0.0}
    matrix = confusion.tolist()
    names = [str(c) for c in class_names]
    return EvaluationReport(metrics, {"per_class": per_class, "confusion_matrix": {"classes": names, "counts": matrix}},
                            {"confusion_matrix.png": confusion_png(matrix, names)})


def regression_report(outputs: torch.Tensor, targets: torch.Tensor) -> EvaluationReport:
    """MAE, RMSE and R² of a regressor's ``outputs`` against ``targets``."""
    from torchmetrics.functional import mean_absolute_error, mean_squared_error, r2_score

    predicted = outputs.reshape(targets.shape).float()
    targets = targets.float()
    metrics = {"mae": float(mean_absolute_error(predicted, targets)),
               "rmse": float(mean_squared_error(predicted, targets).sqrt())}
    if len(targets) > 1:
        metrics["r2"] = float(r2_score(predicted, targets))
    return EvaluationReport(metrics)


def confusion_png(counts: list[list[int]], classes: list[str]) -> bytes:
    """A confusion matrix drawn as a PNG: rows the true class, columns the predicted one, each cell's count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(3.0, 0.5 * len(classes) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(counts, cmap="Blues")
    fig.colorbar(image, ax=ax)
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(classes) <= 30:
        top = max((max(row) for row in counts), default=0)
        for i, row in enumerate(counts):
            for j, value in enumerate(row):
                ax.text(j, i, str(value), ha="center", va="center",
                        color="white" if top and value > top / 2 else "black", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
