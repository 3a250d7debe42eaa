"""``resolve``: a ``TrainingSpec`` checked and resolved once — the algorithm and task chosen, the hyperparameters
under their current names with the algorithm's defaults, every name and type checked against the algorithm, the
data processors that may read the data and the trainer, and the trainer's settings typed. Nothing is built or
read: the service validates a submission with it, ``Session`` starts from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twinkle_core.data.processor import DataProcessor
from twinkle_core.engine.selection import AlgorithmChoice, choose_processor, resolve_algorithm, resolve_task
from twinkle_core.engine.settings import TrainerSettings, check_names, trainer_settings
from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_core.hyperparams import coerce, with_new_names
from twinkle_core.lookup import list_components
from twinkle_core.spec.training import TrainingSpec


@dataclass
class Resolved:
    """A ``TrainingSpec`` resolved (``resolve``).

    Attributes:
        spec: what was resolved.
        choice: the algorithm (its registration, class and defaults).
        task: the task.
        hyperparams: every hyperparameter under its current name, the algorithm's defaults under the given ones
            (the algorithm's data keyword is taken out into ``data``).
        settings: the trainer's typed settings.
        data: the data an algorithm names by keyword (``voice_samples=URI``), if given.
    """

    spec: TrainingSpec
    choice: AlgorithmChoice
    task: str
    hyperparams: dict[str, Any]
    settings: TrainerSettings
    data: str | None = None

    def data_classes(self) -> list[type[DataProcessor]]:
        """Every processor class that may read this training's data (none when the spec holds a configured
        processor)."""
        return data_classes(self.task, self.spec.data_processor)

    def valid_hyperparameters(self) -> set[str]:
        """Every name ``hyperparams`` accepts: the algorithm's, the data processors' and the trainer's."""
        names = {*self.choice.cls.hyperparameters(), *TrainerSettings.parameters()}
        for cls in self.data_classes():
            names.update(cls.parameters())
        return names


def resolve(spec: TrainingSpec) -> Resolved:
    """Choose the algorithm and task of ``spec`` and check every hyperparameter name and type now — the
    algorithm's and its optimizer's, the data processors' (a value any processor that may read the data accepts),
    the trainer's — so that a bad value fails here (in ``Trainer(...)``, at a service's submit), never later in a
    fit. Values are typed again, once, when a fit routes them to the processor that reads its data.

    Raises:
        UnknownComponentError: an unknown algorithm, task or processor name.
        HyperparameterError: an unknown hyperparameter name or a badly typed value.
    """
    choice = resolve_algorithm(spec.algorithm)
    task = resolve_task(choice, spec.task)
    options = dict(spec.hyperparams)
    keyword = choice.cls.data_keyword
    data = options.pop(keyword, None) if keyword else None  # Trainer(MelOTTS, voice_samples=URI)
    classes = data_classes(task, spec.data_processor)
    hyperparams = _renamed({**choice.defaults, **options}, choice, classes)
    candidates = [dict(cls.parameters()) for cls in classes]
    algorithm, data_params = choice.cls.hyperparameters(), {k: v for c in candidates for k, v in c.items()}
    check_names(hyperparams, algorithm, data_params)
    for key, value in hyperparams.items():
        if key in algorithm:
            coerce(algorithm[key], value)
        elif key in data_params:
            errors = []
            for params in (c for c in candidates if key in c):
                try:
                    coerce(params[key], value)
                    break
                except HyperparameterError as err:
                    errors.append(err)
            else:
                raise errors[0]
    return Resolved(spec, choice, task, hyperparams, trainer_settings(hyperparams, algorithm, data_params),
                    str(data) if data is not None else None)


def data_classes(task: str, data_processor: str | DataProcessor | None) -> list[type[DataProcessor]]:
    """Every processor class that may read data for ``task``: the one named, or every processor of the task
    (none for a configured processor: it takes no hyperparameters)."""
    if isinstance(data_processor, DataProcessor):
        return []
    if data_processor:
        return [processor_class(choose_processor(task, None, data_processor))]
    candidates = list_components("data_processor", task=task)
    if not candidates:
        choose_processor(task, None, None)  # the named error: no processor serves the task
    return [processor_class(component) for component in candidates]


def processor_class(component: Any) -> type[DataProcessor]:
    """The ``DataProcessor`` subclass a processor's registration names.

    Raises:
        TwinkleError: it names something else.
    """
    cls = component.load()
    if not (isinstance(cls, type) and issubclass(cls, DataProcessor)):
        raise TwinkleError(f"data processor '{component.qualified_name}' is not a DataProcessor subclass")
    return cls


def _renamed(values: dict[str, Any], choice: AlgorithmChoice, classes: list[type[DataProcessor]]) -> dict[str, Any]:
    """``values`` under the current names: an old name the trainer, the algorithm or a data processor that may read
    the data still accepts becomes its new one, with a ``DeprecationWarning`` naming it."""
    values = with_new_names(values, TrainerSettings.RENAMED, "trainer")
    values = with_new_names(values, choice.cls.renamed_hyperparameters, choice.cls.__name__)
    for cls in classes:
        values = with_new_names(values, cls.renamed_parameters, cls.__name__)
    return values


__all__ = ["Resolved", "data_classes", "processor_class", "resolve"]
