"""Twinkle: training as a service for PyTorch.

Name an algorithm, point at data, and Twinkle does the engineering. This package is the core: the
public API, the extension points (``twinkle_core.hookspecs``) and the ``twinkle`` CLI. Heavy names (``Trainer``,
``Algorithm``, ...) are imported on first access, so ``import twinkle_core`` and the CLI's listing commands stay
light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twinkle_core.errors import TwinkleError
from twinkle_core.hookspecs import Register, hookimpl
from twinkle_core.hyperparams import with_new_names
from twinkle_core.imports import import_heavy
from twinkle_core.lookup import (
    get_component,
    list_algorithms,
    list_components,
    list_data_processors,
    list_exporters,
    list_resource_strategies,
    load_component,
)
from twinkle_core.tasks import Task, get_task, list_tasks

try:
    from importlib.metadata import version as _version

    __version__: str = _version("twinkle-core")
except Exception:  # running from a source tree that is not installed
    __version__ = "0+unknown"

# Public names imported on first access: name -> "module:attr".
_LAZY: dict[str, str] = {
    "Algorithm": "twinkle_core.algorithm:Algorithm",
    "DataProcessor": "twinkle_core.data.processor:DataProcessor",
    "DataSpec": "twinkle_core.data.spec:DataSpec",
    "PreparedData": "twinkle_core.data.processor:PreparedData",
    "ExportResult": "twinkle_core.exporting.base:ExportResult",
    "FitResult": "twinkle_core.engine.result:FitResult",
    "Evaluation": "twinkle_core.engine.evaluation:Evaluation",
    "EvaluationReport": "twinkle_core.metrics:EvaluationReport",
    "Predictions": "twinkle_core.engine.prediction:Predictions",
    "PredictionFile": "twinkle_core.predictions:PredictionFile",
    "load_torch_file": "twinkle_core.engine.checkpoints:load_torch_file",
    "read_weights": "twinkle_core.pretrained:read_weights",
    "load_weights": "twinkle_core.pretrained:load_weights",
    "WeightsReport": "twinkle_core.pretrained:WeightsReport",
    "Plan": "twinkle_core.planning.plan:Plan",
    "RunStore": "twinkle_core.store.runs:RunStore",
    "Session": "twinkle_core.session:Session",
    "Trainer": "twinkle_core.trainer:Trainer",
    "TrainingSpec": "twinkle_core.spec.training:TrainingSpec",
    "ContinueFrom": "twinkle_core.spec.training:ContinueFrom",
}

if TYPE_CHECKING:  # pragma: no cover
    from twinkle_core.algorithm import Algorithm
    from twinkle_core.data.processor import DataProcessor, PreparedData
    from twinkle_core.data.spec import DataSpec
    from twinkle_core.exporting.base import ExportResult
    from twinkle_core.planning.plan import Plan
    from twinkle_core.session import Session
    from twinkle_core.store.runs import RunStore
    from twinkle_core.engine.checkpoints import load_torch_file
    from twinkle_core.pretrained import WeightsReport, load_weights, read_weights
    from twinkle_core.engine.evaluation import Evaluation
    from twinkle_core.engine.prediction import Predictions
    from twinkle_core.predictions import PredictionFile
    from twinkle_core.metrics import EvaluationReport
    from twinkle_core.engine.result import FitResult
    from twinkle_core.spec.training import ContinueFrom, TrainingSpec
    from twinkle_core.trainer import Trainer


def __getattr__(name: str) -> Any:
    """Import heavy public names (which pull in torch) only when they are first used."""
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        value = getattr(import_heavy(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'twinkle_core' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Register",
    "Task",
    "TwinkleError",
    "get_task",
    "list_tasks",
    "__version__",
    "get_component",
    "hookimpl",
    "list_algorithms",
    "list_components",
    "list_data_processors",
    "list_exporters",
    "list_resource_strategies",
    "load_component",
    "with_new_names",
    *_LAZY,
]
