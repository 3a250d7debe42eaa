"""The record Twinkle writes into every checkpoint, and how a checkpoint's classes are found again — safely.

A checkpoint names its algorithm and data processor. Restoring resolves those names through the registry
(registered components), or accepts a class the caller passes in (``Trainer.from_checkpoint(...,
algorithm=MyKronos)``). A ``module:Class`` path that is neither is refused with a ``CheckpointError``
before anything is imported: a crafted checkpoint cannot make Twinkle import a module.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from twinkle_core.algorithm import Algorithm
from twinkle_core.data.processor import DataProcessor
from twinkle_core.engine.checkpoints import CheckpointError
from twinkle_core.errors import UnknownComponentError
from twinkle_core.lookup import get_component, list_components
from twinkle_core.types import plain

RECORD_VERSION = 2
"""The version ``CheckpointRecord`` writes (version 1 records still load)."""


@dataclass(frozen=True)
class CheckpointRecord:
    """Twinkle's record in a checkpoint (under the ``twinkle`` key), as plain JSON-ready values.

    Attributes:
        algorithm: the registered algorithm name, or ``module:Class`` of an ``Algorithm`` subclass passed in.
        task: the task.
        hyperparams: the algorithm's hyperparameters (and the optimizer's).
        data_processor: the registered processor (``plugin:name``), when one was chosen by name or format.
        data_processor_class: ``module:Class`` of a processor instance the user configured, else ``None``.
        data_params: the processor's parameters.
        trainer: the trainer settings.
        data_spec: the ``DataSpec`` the model was built for.
        data_uri: the data trained on.
        data_fingerprint: its fingerprint.
        run: the run's ``twinkle://`` URI.
        target: ``module:Class`` of the algorithm class (informational; never imported from here).
        structure: how the network differs from what its config builds — ``{"pruned": {...}}`` after structured
            pruning: the algorithm's ``prunable_network()`` rewrites the freshly built network into the form that
            was pruned, then its modules are reshaped to the saved tensors before loading
            (``reshape_to_state``); ``None`` for a network as built.
        version: the record's format version.
    """

    algorithm: str
    task: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    data_processor: str | None = None
    data_processor_class: str | None = None
    data_params: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    data_spec: dict[str, Any] | None = None
    data_uri: str | None = None
    data_fingerprint: str | None = None
    run: str | None = None
    target: str | None = None
    structure: dict[str, Any] | None = None
    version: int = RECORD_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain values, as stored in the checkpoint (an enum as its text: the checkpoint loads with
        ``weights_only=True``, which unpickles no class of ours)."""
        return plain(asdict(self))

    @classmethod
    def from_dict(cls, data: Any, uri: str) -> CheckpointRecord:
        """Validate a stored record (version 1 or 2).

        Raises:
            CheckpointError: not a record, a newer version, or a field of the wrong type; the message names it.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("algorithm"), str):
            raise CheckpointError(
                f"checkpoint '{uri}' was not written by Twinkle (no 'twinkle' record); "
                "load its weights into an Algorithm yourself, or train with Twinkle"
            )
        version = data.get("version", 1)
        if not isinstance(version, int) or version > RECORD_VERSION:
            raise CheckpointError(f"checkpoint '{uri}' has record version {version!r}; this Twinkle reads up to "
                                  f"{RECORD_VERSION} — upgrade twinkle-core")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("hyperparams", "data_params", "trainer", "structure"):
            if not isinstance(values.get(name) or {}, Mapping):
                raise CheckpointError(f"checkpoint '{uri}': record field '{name}' is not a mapping")
        for name in ("task", "data_processor", "data_processor_class", "data_uri", "data_fingerprint", "run", "target"):
            if values.get(name) is not None and not isinstance(values[name], str):
                raise CheckpointError(f"checkpoint '{uri}': record field '{name}' is not text")
        if not values.get("task"):
            raise CheckpointError(f"checkpoint '{uri}': the record names no task")
        return cls(**{**values, "version": RECORD_VERSION})


def class_path(cls: type) -> str:
    """``module:Qualname`` of a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def restore_algorithm(record: CheckpointRecord, uri: str, given: str | type[Algorithm] | None) -> str | type[Algorithm]:
    """What to build the checkpoint's algorithm from: its registered name, or the class the caller passed.

    Raises:
        CheckpointError: the record names a module path that is neither registered nor ``given``, or
            ``given`` is not the checkpoint's algorithm. Nothing is imported before the check.
    """
    name = record.algorithm
    if ":" not in name:  # a registered name: the registry resolves it (plugin:name is also a registered name)
        try:
            component = get_component("algorithm", name)
        except UnknownComponentError as err:
            raise CheckpointError(f"checkpoint '{uri}' is of algorithm '{name}', which no installed plugin registers "
                                  f"({err}); install its plugin") from None
        if given is not None:
            same = (get_component("algorithm", given).name == component.name if isinstance(given, str)
                    else given is component.load())
            if not same:
                raise CheckpointError(f"checkpoint '{uri}' is of algorithm '{name}', not '{_given_name(given)}'; "
                                      "use a checkpoint of that algorithm or drop algorithm=")
        return component.name
    if inspect.isclass(given) and issubclass(given, Algorithm):
        if class_path(given) != name:
            raise CheckpointError(f"checkpoint '{uri}' is of algorithm class '{name}', not '{class_path(given)}'; "
                                  "pass the class the checkpoint was trained with")
        return given
    registered = [c for c in list_components("algorithm") if c.target_path == name]
    if registered:
        return registered[0].name
    raise CheckpointError(
        f"checkpoint '{uri}' names the module path '{name}' as its algorithm, which is not a registered algorithm; "
        "Twinkle does not import modules named in a checkpoint. Pass the class: "
        "Trainer.from_checkpoint(..., algorithm=YourAlgorithm)"
    )


def restore_processor(record: CheckpointRecord, uri: str, given: Any) -> Any:
    """The data processor to rebuild: a configured instance (rebuilt from the record's values), or ``None``
    when the registered processor named by the record is used.

    Raises:
        CheckpointError: the record names an unregistered processor class that ``given`` does not match.
    """
    path = record.data_processor_class
    if path is None:
        return given
    if isinstance(given, DataProcessor):
        given = type(given)
    if inspect.isclass(given) and issubclass(given, DataProcessor):
        if class_path(given) != path:
            raise CheckpointError(f"checkpoint '{uri}' was trained with data processor '{path}', not "
                                  f"'{class_path(given)}'; pass that processor")
        return given.from_params(record.data_params)
    registered = [c for c in list_components("data_processor") if c.target_path == path]
    if registered:
        return registered[0].load().from_params(record.data_params)
    raise CheckpointError(
        f"checkpoint '{uri}' names the module path '{path}' as its data processor, which is not registered; "
        "Twinkle does not import modules named in a checkpoint. Pass it: "
        "Trainer.from_checkpoint(..., data_processor=YourProcessor(...))"
    )


def _given_name(given: str | type[Algorithm]) -> str:
    return given if isinstance(given, str) else class_path(given)
