"""Core's own components, registered through the same hooks as any third-party plugin.

This module is the plugin named ``twinkle-core``. Like every plugin module it imports nothing heavy: each
target is a ``"module:attr"`` string imported only when used.
"""

from __future__ import annotations

from twinkle_core.hookspecs import Register, hookimpl

TABULAR_TASKS = ["tabular_classification", "tabular_regression"]


@hookimpl
def register_algorithms(register: Register) -> None:
    """The tabular MLP (classification and regression)."""
    register(
        "tabular-mlp",
        "twinkle_core.algorithms.tabular_mlp:TabularMLP",
        task=TABULAR_TASKS,
        description="MLP over numeric features, standardised inside the model",
    )


@hookimpl
def register_data_processors(register: Register) -> None:
    """CSV and Parquet tables (and their index files) for the tabular tasks."""
    register(
        "tabular",
        "twinkle_core.data.tabular:TabularProcessor",
        task=TABULAR_TASKS,
        formats=["csv", "parquet", "pq", "idx"],
        description="CSV/Parquet rows: numeric features and a label column",
    )


@hookimpl
def register_resource_strategies(register: Register) -> None:
    """The default resource strategy."""
    register(
        "default",
        "twinkle_core.planning.strategy:DefaultStrategy",
        description="devices, precision, DDP/FSDP/DeepSpeed, micro-batch and accumulation by model and data size",
    )


@hookimpl
def register_exporters(register: Register) -> None:
    """TorchScript and ONNX (with static INT8)."""
    register("torchscript", "twinkle_core.exporting.torchscript:TorchScriptExporter", format="torchscript",
             description="TorchScript (torch.jit.trace), one .pt file")
    register("onnx", "twinkle_core.exporting.onnx:ONNXExporter", format="onnx",
             description="ONNX at a chosen opset; quantize=True for static QDQ INT8")
