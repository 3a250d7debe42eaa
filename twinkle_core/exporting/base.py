"""``Exporter``: writes a trained model in a deployable format and runs the artefact back."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import numpy as np
from torch import nn

from twinkle_core.errors import TwinkleError


Inputs = Any
"""What an exported model takes: one tensor (array), or a dict of named tensors (arrays) for a model with
several inputs — passed to the module positionally in the dict's order, and to the artefact by name."""


def input_values(inputs: Inputs) -> tuple[Any, ...]:
    """The positional arguments of ``inputs``: the dict's values in order, or the one tensor."""
    return tuple(inputs.values()) if isinstance(inputs, dict) else (inputs,)


def input_size(inputs: Inputs) -> int:
    """The batch size of ``inputs`` (the first tensor's first dimension)."""
    return len(input_values(inputs)[0])


def map_inputs(inputs: Inputs, function: Callable[[Any], Any]) -> Inputs:
    """``function`` applied to each tensor of ``inputs`` (the dict's keys kept)."""
    return {name: function(value) for name, value in inputs.items()} if isinstance(inputs, dict) else function(inputs)


class ExportError(TwinkleError):
    """An export that cannot be made as asked (an unsupported option, opset or model)."""


class ExportVerificationError(ExportError):
    """An exported artefact whose outputs differ from the trained model's beyond the tolerance."""


@dataclass
class ExportResult:
    """An export and its verification against the PyTorch model on real validation inputs.

    Attributes:
        format: the exporter's format (``"onnx"``, ``"torchscript"``, ...).
        path: where the artefact was written (any URI).
        quantized: whether it is INT8.
        max_abs_diff: the largest absolute difference between PyTorch's and the artefact's outputs.
        cosine: the cosine similarity of those outputs (all samples flattened together).
        samples: how many validation samples were compared.
        metric: the metric compared (``"accuracy"``, ...), if the task has one.
        metric_torch: that metric for the PyTorch model.
        metric_export: that metric for the artefact.
        metric_delta: ``metric_export - metric_torch``.
        size_bytes: the artefact's size.
        details: exporter facts (opset, calibration samples, ...).
    """

    format: str
    path: str
    quantized: bool
    max_abs_diff: float
    samples: int
    cosine: float | None = None
    metric: str | None = None
    metric_torch: float | None = None
    metric_export: float | None = None
    metric_delta: float | None = None
    size_bytes: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


class Exporter(ABC):
    """Base class of exporters (registered through ``register_exporters``).

    Class attributes:
        format: the format name.
        suffix: the artefact's file suffix (``".onnx"``): added to an ``output`` whose name ends in none of
            ``suffixes`` (``-o out/yolo3`` writes ``out/yolo3.onnx``).
        suffixes: every ending an artefact of the format may have (default: ``suffix`` alone; TorchScript also
            ``.torchscript``, as ultralytics names it).
        supports_quantize: whether ``quantize=True`` is accepted.
        int8_only: the format is INT8 by definition (``quantize`` is implied).
        calibrates: ``quantize`` needs calibration inputs (static INT8 activations); ``False`` for a format that
            quantizes weights alone (GGUF's q8_0), which gets ``calibration=None``.
        float_tolerance: how far a float artefact may differ from PyTorch, absolute and relative to the
            outputs' magnitude (``1e-4`` for fp32 formats; a format that runs in fp16 sets more).
        verify_samples: at most this many validation samples are run through the artefact.
        decodes_on_cpu: the format runs on an integer accelerator, so it exports the algorithm's
            ``quantizable_export()`` module where there is one, and verification decodes its outputs on the CPU.
        folder: the artefact is a folder of files (a Hugging Face model folder), written and moved as a whole;
            ``path`` in ``export`` and ``runner`` is then a folder that does not exist yet.
    """

    format: ClassVar[str] = ""
    suffix: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    supports_quantize: ClassVar[bool] = False
    int8_only: ClassVar[bool] = False
    calibrates: ClassVar[bool] = True
    float_tolerance: ClassVar[float] = 1e-4
    verify_samples: ClassVar[int] = 2048
    decodes_on_cpu: ClassVar[bool] = False
    folder: ClassVar[bool] = False

    @abstractmethod
    def export(
        self,
        model: nn.Module,
        example: Inputs,
        path: str,
        *,
        quantize: bool = False,
        calibration: Iterable[np.ndarray] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Write ``model`` (in eval mode, traced on ``example``) to the local file ``path``.

        Returns:
            JSON-ready facts about the artefact (opset, ...), stored with the result.

        Raises:
            ExportError: an option the format cannot honour, named with the fix.
        """

    @abstractmethod
    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray | list[np.ndarray]]:
        """Load the artefact at local ``path`` and return a function from an input batch (an array, or a dict of
        named arrays for a model with several inputs) to its output (the list of outputs for a graph with
        several)."""

    def describe(self, path: str, card: dict[str, Any]) -> bool:
        """Write the inference card (task, inputs, classes, preprocessing, ...: see ``Trainer.export``) into the
        artefact at local ``path`` — its own metadata — and return True; False (the base) when the format has no
        place for it (the JSON written beside every export carries it anyway)."""
        return False

    def close(self) -> None:
        """Release what ``export`` and ``runner`` hold (a converter process, ...); called once the
        artefact is verified. The default holds nothing."""
