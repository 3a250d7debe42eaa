"""Core's own components, registered through the same hooks as any third-party plugin.

This module is the plugin named ``twinkle-core``. Like every plugin module it imports nothing heavy: each
target is a ``"module:attr"`` string imported only when used.
"""

from __future__ import annotations

from twinkle_core.hookspecs import Register, hookimpl

TABULAR_TASKS = ["tabular_classification", "tabular_regression"]


@hookimpl
def register_tasks(register: Register) -> None:
    """The tasks every Twinkle installation knows (plugins add more the same way)."""
    register("tabular_classification", kind="classification", description="predict a class from a row of numeric features",
             batch="(features float32 [B, F], class int64 [B])")
    register("tabular_regression", kind="regression", description="predict a number from a row of numeric features",
             batch="(features float32 [B, F], target float32 [B])")
    register("image_classification", kind="classification", description="predict a class from an image",
             batch="(images float32 [B, C, H, W], class int64 [B])")
    register("object_detection", kind="detection", description="find boxes and classes of objects in an image",
             batch="dict: img float32 [B, 3, H, W], bboxes, cls, batch_idx")
    register("time_series_forecasting", kind="forecasting",
             description="predict the next values of a time series (e.g. OHLCV bars)",
             batch="(look-back window float32 [B, T, F], horizon float32 [B, H, F])")
    register("text_to_speech", kind="generation", description="synthesise speech audio from text",
             batch="dict: phone ids int64 [B, L], audio features float32 [B, T, M]")


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
        formats=["csv", "parquet", "pq", "idx", "hf-dataset"],
        description="CSV/Parquet rows (or a Hugging Face dataset folder): numeric features and a label column",
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


@hookimpl
def register_trackers(register: Register) -> None:
    """MLflow, TensorBoard and Weights & Biases (each needs its library: the extras ``twinkle-core[mlflow]``,
    ``[tensorboard]``, ``[wandb]``)."""
    register("mlflow", "twinkle_core.tracking.builtin:MLflowTracker",
             description="MLflow: MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME")
    register("tensorboard", "twinkle_core.tracking.builtin:TensorBoardTracker",
             description="TensorBoard event files: TENSORBOARD_LOGGING_DIR, else tensorboard/ in the run's folder")
    register("wandb", "twinkle_core.tracking.builtin:WandbTracker",
             description="Weights & Biases: WANDB_PROJECT, WANDB_MODE (offline keeps it on the machine)")


@hookimpl
def register_checks(register: Register) -> None:
    """What ``twinkle doctor`` looks at for core: Python, torch, devices, plugins, the store, the offline settings,
    onnxruntime and the Tinker SDK."""
    for name, target, description in (
        ("python", "check_python", "the interpreter and its virtual environment"),
        ("torch", "check_torch", "torch's version, build (CUDA or CPU) and threads"),
        ("devices", "check_devices", "the CPU and GPUs, and whether each computes bf16 natively"),
        ("plugins", "check_plugins", "every installed plugin loads"),
        ("store", "check_store", "the run store ($TWINKLE_HOME) and whether it can be written"),
        ("offline", "check_offline", "the settings that keep libraries from reaching a hub"),
        ("onnxruntime", "check_onnxruntime", "onnxruntime, for export checks and ONNX-only predict"),
        ("tinker-sdk", "check_tinker_sdk", "the Tinker SDK, for twinkle serve --tinker (optional)"),
    ):
        register(name, f"twinkle_core.doctor:{target}", description=description)
