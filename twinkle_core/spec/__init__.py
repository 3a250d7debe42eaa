"""What a training is, as one value resolved once: ``TrainingSpec`` (the algorithm, task, hyperparameters, data
processor, resource strategy, where the run goes, its monitor rules and budget) and ``resolve`` (the algorithm and
task chosen, every hyperparameter name and type checked, the trainer's settings typed) — what ``Trainer``,
``Session``, a ``Job``, the service's ``JobRequest`` and the CLI all build, and what the service validates a
submission with, without a ``Trainer``."""

from twinkle_core.spec.resolve import Resolved, resolve
from twinkle_core.spec.training import TrainingSpec

__all__ = ["Resolved", "TrainingSpec", "resolve"]
