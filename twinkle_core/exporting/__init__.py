"""Export: the ``Exporter`` extension point, core's TorchScript and ONNX exporters, verification."""

from twinkle_core.exporting.base import ExportError, Exporter, ExportResult
from twinkle_core.exporting.onnx import ONNXExporter

__all__ = ["ExportError", "ExportResult", "Exporter", "ONNXExporter"]
