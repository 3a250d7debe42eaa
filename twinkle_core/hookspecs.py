"""The extension points of Twinkle, as pluggy hook specifications.

A plugin is a module (found through the ``twinkle`` entry-point group) or any object with functions
decorated by ``hookimpl``. Each hook receives one ``register`` callback and calls it once per
component:

```python
from twinkle_core import hookimpl

@hookimpl
def register_algorithms(register):
    register("acme-linear", "acme_mod:AcmeLinear", task="tabular_classification",
             description="A linear classifier")
```

``register(name, target, **meta)`` takes ``target`` as a ``"module:attr"`` string, imported only when the
component is first used, or as the object itself. Keep plugin modules light: import nothing heavy (torch,
timm, ...) at their top level, so that ``twinkle plugins list`` stays fast.
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "twinkle"
"""pluggy project name and entry-point group of every Twinkle plugin."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marker for Twinkle's hook specifications (used by core only)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker a plugin puts on its hook implementations: ``@hookimpl def register_algorithms(register): ...``."""


class Register(Protocol):
    """The callback each hook receives: ``register(name, target, **meta)``."""

    def __call__(self, name: str, target: Any, **meta: Any) -> None:
        """Register one component.

        Args:
            name: the component's name, unique within its kind (``"resnet50"``, ``"onnx"``).
            target: ``"package.module:attr"`` (imported on first use) or the object itself.
            **meta: descriptive metadata: ``task`` (algorithms and data processors), ``formats`` (data
                processors: the suffixes they read), ``format`` (exporters), ``description`` (all), ``aliases`` (a
                list of other names), and anything else the plugin wants listed.
        """


@hookspec
def register_tasks(register: Register) -> None:
    """Register tasks: what a model learns to do, and how a run of it is judged.

    A task has no target: ``register(name, kind=..., description=..., monitor=..., mode=..., batch=...)``.
    ``kind`` is one of ``classification``, ``regression``, ``detection``, ``forecasting``, ``generation``,
    ``other``; it gives algorithms of the task their default loss and metrics and the monitored metric
    (``monitor``/``mode`` override it). ``batch`` says in words what a batch looks like.

    For example:

    ```python
    @hookimpl
    def register_tasks(register):
        register("text_classification", kind="classification", description="predict a class from a text",
                 batch="(token ids int64 [B, L], class int64 [B])")
    ```
    """


@hookspec
def register_algorithms(register: Register) -> None:
    """Register ``twinkle_core.Algorithm`` subclasses under a name, with their task.

    ``meta`` must carry ``task`` (for example ``"image_classification"``) and should carry ``description``.

    For example:

    ```python
    @hookimpl
    def register_algorithms(register):
        register("resnet50", "twinkle_vision.classification:ResNet50", task="image_classification",
                 description="ResNet-50 (timm), random init unless weights= is given")
    ```
    """


@hookspec
def register_data_processors(register: Register) -> None:
    """Register ``twinkle_core.DataProcessor`` subclasses for a task and the data formats they read.

    ``meta`` must carry ``task`` and should carry ``formats``, the suffixes read (``["csv", "parquet"]``,
    ``"folder"`` for a directory: how a processor is picked for a URI), and ``description``.

    For example:

    ```python
    @hookimpl
    def register_data_processors(register):
        register("ohlcv", "twinkle_timeseries.data:FinancialDataProcessor",
                 task="time_series_forecasting", formats=["csv", "parquet", "folder"], description="OHLCV bars")
    ```
    """


@hookspec
def register_resource_strategies(register: Register) -> None:
    """Register resource strategies: callables that turn (algorithm, data, hardware, history) into a plan.

    ``meta`` should carry ``description`` and may carry ``task`` when the strategy applies to one task only.

    For example:

    ```python
    @hookimpl
    def register_resource_strategies(register):
        register("yolo-detection", "twinkle_vision.yolo.strategy:DetectionStrategy", task="object_detection",
                 description="mixed precision and accumulation to a nominal batch of 64")
    ```
    """


@hookspec
def register_exporters(register: Register) -> None:
    """Register exporters that write a trained model in a deployable format.

    ``meta`` must carry ``format`` (``"torchscript"``, ``"onnx"``, ``"rknn"``, ...) and should carry
    ``description``.

    For example:

    ```python
    @hookimpl
    def register_exporters(register):
        register("rknn", "twinkle_edge.exporters:RKNNExporter", format="rknn",
                 description="Rockchip RK3588 NPU via rknn-toolkit2")
    ```
    """


@hookspec
def register_commands(register: Register) -> None:
    """Register ``twinkle`` subcommands: a ``click`` command or group, imported only when it is run.

    A command's name must not be one of core's own (``train``, ``serve``, ...): core's commands come first.

    For example:

    ```python
    @hookimpl
    def register_commands(register):
        register("edge", "twinkle_edge.cli:edge", description="Prune, quantize and convert for edge devices")
    ```
    """


@hookspec
def register_training_backends(register: Register) -> None:
    """Register training backends: what trains and samples a plugin's models step by step for clients that write
    their own loop (``twinkle serve --tinker``; a ``twinkle_core.lowlevel.TrainingBackend`` subclass, built with
    the server's base-model folders).

    For example:

    ```python
    @hookimpl
    def register_training_backends(register):
        register("llm", "twinkle_llm.backend:LoraBackend", description="LoRA adapters on shared base models")
    ```
    """


@hookspec
def register_checks(register: Register) -> None:
    """Register what ``twinkle doctor`` checks: a callable returning a ``twinkle_core.doctor.Finding`` (``ok``,
    ``optional``, ``warn`` or ``missing``, with what was found and the fix) for each native piece, program or
    optional package the plugin needs. ``missing`` makes ``twinkle doctor`` exit 1: use it for what the plugin
    cannot work without, ``optional`` for what only one of its features needs.

    For example:

    ```python
    @hookimpl
    def register_checks(register):
        register("espeak-ng", "twinkle_audio.checks:espeak_ng", description="espeak-ng, the phonemizer MelOTTS runs")
    ```
    """


@hookspec
def register_rewards(register: Register) -> None:
    """Register rewards for reinforcement learning: a ``twinkle_core.rewards.Reward`` subclass, built with the
    options a training gives it and called with a batch of completions and their prompts' rows, returning one score
    per completion (``twinkle rewards list`` shows them).

    For example:

    ```python
    @hookimpl
    def register_rewards(register):
        register("exact_answer", "twinkle_llm.rewards:ExactAnswer", description="1 when the answer is the row's")
    ```
    """


@hookspec
def register_trackers(register: Register) -> None:
    """Register experiment trackers a run can report to (``report_to=[name]``): a
    ``twinkle_core.tracking.Tracker`` subclass, built with no arguments and configured by its own settings
    (environment variables), sent the run's parameters, tags, metrics and files from a thread of its own
    (``twinkle trackers list`` shows them).

    For example:

    ```python
    @hookimpl
    def register_trackers(register):
        register("mlflow", "twinkle_core.tracking.builtin:MLflowTracker", description="MLflow tracking")
    ```
    """


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name, value in dict(globals()).items() if name.startswith("register_") and callable(value)
)
"""Every hook Twinkle calls, in the order they are specified here."""


__all__ = ["HOOK_NAMES", "PROJECT_NAME", "Register", "hookimpl"]
