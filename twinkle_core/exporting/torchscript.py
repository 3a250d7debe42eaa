"""The TorchScript exporter (``torch.jit.trace``)."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn

from twinkle_core.exporting.base import ExportError, Exporter, input_values


CARD_FILE = "twinkle.json"
"""The extra file of an exported TorchScript module holding its inference card (JSON)."""


class TorchScriptExporter(Exporter):
    """Traces the model with ``torch.jit.trace`` and saves one ``.pt`` file loadable without Python code."""

    format = "torchscript"
    suffix = ".pt"
    suffixes = (".pt", ".pth", ".torchscript")

    def export(
        self,
        model: nn.Module,
        example: Any,
        path: str,
        *,
        quantize: bool = False,
        calibration: Iterable[np.ndarray] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Trace and save; ``quantize`` is refused (use the ONNX exporter for INT8)."""
        if quantize:
            raise ExportError("quantize=True is not supported for torchscript; use format='onnx' for INT8")
        if options:
            raise ExportError(f"torchscript export takes no options, got {', '.join(sorted(options))}")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # TorchScript's deprecation and tracer warnings
            traced = torch.jit.trace(model, input_values(example), check_trace=False)
            torch.jit.save(traced, path)
        return {"torch": torch.__version__}

    def describe(self, path: str, card: dict[str, Any]) -> bool:
        """Re-save the module with the card as the extra file ``twinkle.json`` (read it back with
        ``torch.jit.load(path, _extra_files={"twinkle.json": ""})``)."""
        import json

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(path, map_location="cpu")
            torch.jit.save(module, path, _extra_files={CARD_FILE: json.dumps(card, sort_keys=True)})
        return True

    def runner(self, path: str) -> Callable[[np.ndarray], np.ndarray]:
        """Load with ``torch.jit.load`` (CPU)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(path, map_location="cpu")
        module.eval()

        def run(batch: Any) -> np.ndarray:
            with torch.no_grad():
                out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in input_values(batch)))
            return (out[0] if isinstance(out, (tuple, list)) else out).numpy()

        return run
