"""An algorithm's declared hyperparameters as data — what ``GET /api/v1/algorithms/{name}`` returns and the
dashboard's submit form is built from — and the form's values turned back into typed hyperparameters."""

from __future__ import annotations

import inspect
import typing
from enum import Enum
from typing import Any, Literal

from twinkle_core.errors import TwinkleError

TRAINER_FIELDS = ("max_epochs", "max_steps", "batch_size", "seed", "precision", "accelerator", "devices",
                  "checkpoint_every_n_steps", "early_stopping_patience")
"""Trainer settings the submit form offers beside the algorithm's own (every other one still works by API)."""


def _describe(hp: Any) -> dict[str, Any]:
    choices = _choices(hp.annotation)
    default = None if hp.default is inspect.Parameter.empty else hp.default
    if not isinstance(default, (str, int, float, bool, type(None))):
        default = str(default)
    return {"name": hp.name, "type": hp.type_name(), "default": default, "required": hp.required,
            "owner": hp.owner, "help": hp.help, "choices": choices}


def _choices(annotation: Any) -> list[Any] | None:
    """The values of a ``Literal`` or an ``Enum`` (also inside ``X | None``)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is Literal:
            return list(typing.get_args(candidate))
        if isinstance(candidate, type) and issubclass(candidate, Enum):
            return [member.value for member in candidate]
    return None


def algorithm_form(name: str) -> dict[str, Any]:
    """The algorithm ``name``: its tasks, defaults and every hyperparameter (``owner``: algorithm, optimizer,
    trainer).

    Raises:
        TwinkleError: no algorithm of that name (with the names that exist).
    """
    from twinkle_core.engine.selection import AlgorithmChoice, resolve_algorithm
    from twinkle_core.engine.settings import TrainerSettings
    from twinkle_core.lookup import list_components

    # a family is listed by its pattern ("timm/*"): its form is the family's, though only its members train
    family = next((c for c in list_components("algorithm") if c.is_family and name in (c.name, c.qualified_name)),
                  None)
    if family is not None:
        cls = family.load()
        choice = AlgorithmChoice(family.name, cls, family.tasks or ((cls.task,) if cls.task else ()), {})
    else:
        choice = resolve_algorithm(name)
    params = [_describe(hp) for hp in choice.cls.hyperparameters().values()]
    trainer = TrainerSettings.parameters()
    params += [_describe(trainer[key]) for key in TRAINER_FIELDS if key in trainer]
    for param in params:
        if param["name"] in choice.defaults:
            param["default"] = choice.defaults[param["name"]]
    return {"name": choice.name, "tasks": list(choice.tasks), "hyperparameters": params}


def typed_values(form: dict[str, Any], fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The filled-in form fields as hyperparameters (text stays text: the trainer coerces it by the declared
    type and names a bad value); empty fields are left to their defaults."""
    known = {f["name"] for f in fields}
    values = {}
    for key, value in form.items():
        if not key.startswith("hp_"):
            continue
        name = key[3:]
        if name not in known:
            raise TwinkleError(f"unknown hyperparameter {name!r}")
        if str(value).strip():
            values[name] = str(value).strip()
    return values
