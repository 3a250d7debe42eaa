"""Declared hyperparameters: read from ``__init__`` signatures, validated and coerced by type.

An algorithm declares its hyperparameters the plain Python way — typed keyword arguments with defaults:

```python
class KronosModel(Algorithm):
    def __init__(self, n_heads: int = 8, d_model: int = 256) -> None:
        super().__init__(task="time_series_forecasting")
```

``declared`` reads them; ``coerce`` checks a user's value against the annotation (``"8"`` from the
CLI becomes ``8``; ``"abc"`` for an ``int`` is a ``HyperparameterError`` naming the key).
"""

from __future__ import annotations

import inspect
import math
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, Union

from twinkle_core.errors import HyperparameterError

_MISSING = inspect.Parameter.empty


@dataclass(frozen=True)
class Hyperparameter:
    """One declared hyperparameter.

    Attributes:
        name: its keyword.
        annotation: its type (``int``, ``float``, ``Literal["adamw", "sgd"]``, ``int | None``, ...).
        default: its default value (``inspect.Parameter.empty`` when required).
        owner: who takes it: ``"algorithm"``, ``"optimizer"``, ``"data"`` or ``"trainer"``.
        help: a short description.
    """

    name: str
    annotation: Any
    default: Any
    owner: str
    help: str = ""

    @property
    def required(self) -> bool:
        """Whether the hyperparameter has no default."""
        return self.default is _MISSING

    def type_name(self) -> str:
        """The annotation as readable text (``"int"``, ``"'adamw' | 'sgd'"``)."""
        return _type_name(self.annotation)


def declared(func: Any, owner: str, skip: tuple[str, ...] = ("self", "task")) -> dict[str, Hyperparameter]:
    """The keyword parameters of ``func`` (usually an ``__init__``) as ``Hyperparameter`` records."""
    try:
        hints = typing.get_type_hints(func, include_extras=True)  # keep Annotated ranges
    except Exception:  # unresolved forward references: fall back to the raw annotations
        hints = {}
    params: dict[str, Hyperparameter] = {}
    for name, param in inspect.signature(func).parameters.items():
        if name in skip or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name, param.annotation)
        if annotation is _MISSING and param.default is not _MISSING and param.default is not None:
            annotation = type(param.default)
        params[name] = Hyperparameter(name, annotation, param.default, owner)
    return params


def validate(declared_params: dict[str, Hyperparameter], given: Any, owner: str, *, typed: bool = False) -> dict[str, Any]:
    """Check that every key of ``given`` is declared and coerce each value to its type (``typed``: the values
    were coerced already — only names and required ones are checked).

    Raises:
        HyperparameterError: an unknown key (the message lists the valid ones, naming ``owner``), a badly
            typed value, or a required hyperparameter that is missing.
    """
    values = dict(given or {})
    unknown = sorted(set(values) - set(declared_params))
    if unknown:
        raise HyperparameterError(
            f"unknown hyperparameter {', '.join(repr(u) for u in unknown)} for {owner}; "
            f"valid: {', '.join(sorted(declared_params)) or 'none'}"
        )
    missing = [hp.name for hp in declared_params.values() if hp.required and hp.name not in values]
    if missing:
        raise HyperparameterError(f"{owner} needs hyperparameter(s) {', '.join(missing)}")
    if typed:
        return values
    return {name: coerce(declared_params[name], value) for name, value in values.items()}


def with_new_names(values: Mapping[str, Any], renames: Mapping[str, str], owner: str = "") -> dict[str, Any]:
    """``values`` with each old name of ``renames`` (old → new) replaced by its new one, each with a
    ``DeprecationWarning`` that names the new one — the way a hyperparameter (or another keyword) keeps working
    for a release after it is renamed. ``owner`` (what takes the name) is named in the messages; an old name
    holding ``None`` (a default, as an older run's record stores it) moves without a warning.

    Raises:
        HyperparameterError: an old name and its new one both given.
    """
    out = dict(values)
    whose = f" ({owner})" if owner else ""
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise HyperparameterError(f"'{old}' is the old name of '{new}'{whose}; both are given: pass only {new}")
        value = out.pop(old)
        out[new] = value
        if value is None:  # a default, as a record of an older run holds it: nothing was chosen, nothing to say
            continue
        warnings.warn(f"'{old}' is renamed '{new}'{whose}: pass {new}={value!r} (the old name is accepted until the "
                      "next minor release)", DeprecationWarning, stacklevel=3)
    return out


def coerce(hp: Hyperparameter, value: Any) -> Any:
    """Return ``value`` converted to ``hp``'s type, or raise ``HyperparameterError`` naming it."""
    try:
        return _coerce(hp.annotation, value)
    except OutOfRangeError as err:
        raise HyperparameterError(
            f"hyperparameter '{hp.name}' = {value!r} is out of range: it {err} ({hp.type_name()}); "
            f"the default is {hp.default!r}"
        ) from None
    except (TypeError, ValueError) as err:
        raise HyperparameterError(
            f"hyperparameter '{hp.name}' expects {hp.type_name()}, got {value!r} ({type(value).__name__}): {err}"
        ) from None


class OutOfRangeError(ValueError):
    """A value of the right type outside its declared range."""


def _check_range(constraint: Any, value: Any) -> None:
    """Apply one ``annotated_types`` constraint (``Gt``, ``Ge``, ``Lt``, ``Le``, ``Interval``, ``MinLen``...)."""
    import annotated_types as at

    checks = {at.Gt: ("gt", lambda v, b: v > b, ">"), at.Ge: ("ge", lambda v, b: v >= b, ">="),
              at.Lt: ("lt", lambda v, b: v < b, "<"), at.Le: ("le", lambda v, b: v <= b, "<=")}
    if isinstance(constraint, at.Interval):
        for kind in (at.Gt, at.Ge, at.Lt, at.Le):
            bound = getattr(constraint, checks[kind][0])
            if bound is not None:
                _check_range(kind(bound), value)
        return
    for kind, (field, ok, sign) in checks.items():
        if isinstance(constraint, kind):
            bound = getattr(constraint, field)
            if not ok(value, bound):  # NaN fails every comparison, so it is out of any range
                raise OutOfRangeError(f"must be {sign} {bound}")
            return
    if isinstance(constraint, at.MinLen) and len(value) < constraint.min_length:
        raise OutOfRangeError(f"needs at least {constraint.min_length} item(s)")
    if isinstance(constraint, at.MaxLen) and len(value) > constraint.max_length:
        raise OutOfRangeError(f"takes at most {constraint.max_length} item(s)")
    if isinstance(constraint, at.Predicate) and not constraint.func(value):
        raise OutOfRangeError(f"must satisfy {getattr(constraint.func, '__name__', 'its check')}")


def _finite(number: float) -> float:
    """``number``, which must be finite: no hyperparameter means NaN or infinity, and JSON cannot hold them."""
    if not math.isfinite(number):
        raise OutOfRangeError("must be a finite number")
    return number


def _coerce(annotation: Any, value: Any, finite: bool = True) -> Any:
    """``value`` as ``annotation``; a float must be finite (``finite=False``: the caller checks a range first)."""
    if annotation in (_MISSING, Any, object):
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # a type with its range: Annotated[float, Gt(0)]
        base, *constraints = args
        value = _coerce(base, value, finite=False)
        for constraint in constraints:
            _check_range(constraint, value)
        return _finite(value) if isinstance(value, float) else value  # a range says why first; then finite
    if origin is Literal:
        for choice in args:
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise ValueError(f"choose one of {', '.join(repr(a) for a in args)}")
    if origin in (Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            if type(None) in args:
                return None
        errors: list[ValueError | TypeError] = []
        for arg in sorted((a for a in args if a is not type(None)), key=lambda a: a is str):
            try:
                return _coerce(arg, value)
            except (TypeError, ValueError) as err:
                errors.append(err)
        out_of_range = [e for e in errors if isinstance(e, OutOfRangeError)]
        if out_of_range:  # the right type, outside its range
            raise OutOfRangeError("; ".join(str(e) for e in out_of_range))
        raise ValueError("; ".join(str(e) for e in errors))
    if origin in (list, tuple, typing.Sequence, typing.Iterable) or annotation in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list")
        item = args[0] if args else Any
        items = [_coerce(item, v) for v in value]
        return tuple(items) if origin is tuple or annotation is tuple else items
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "1", "yes", "on", "false", "0", "no", "off"}:
            return value.lower() in {"true", "1", "yes", "on"}
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError("expected true or false")
    if annotation is int:
        if isinstance(value, bool):
            raise TypeError("expected an integer, not a boolean")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise TypeError("expected an integer")
    if annotation is float:
        if isinstance(value, bool):
            raise TypeError("expected a number, not a boolean")
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            number = float(value.strip())
        else:
            raise TypeError("expected a number")
        return _finite(number) if finite else number
    if isinstance(annotation, type) and issubclass(annotation, Enum):  # a closed set of names: its member
        try:
            return annotation(value)
        except ValueError:
            raise ValueError(f"choose one of {', '.join(repr(m.value) for m in annotation)}") from None
    if annotation is str:
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return value
    if isinstance(annotation, type) and not isinstance(value, annotation):
        raise TypeError(f"expected {annotation.__name__}")
    return value


def _range_text(constraint: Any) -> str:
    import annotated_types as at

    if isinstance(constraint, at.Interval):
        parts = [f"{sign} {getattr(constraint, f)}" for f, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
                 if getattr(constraint, f) is not None]
        return " and ".join(parts)
    for kind, field, sign in ((at.Gt, "gt", ">"), (at.Ge, "ge", ">="), (at.Lt, "lt", "<"), (at.Le, "le", "<=")):
        if isinstance(constraint, kind):
            return f"{sign} {getattr(constraint, field)}"
    return type(constraint).__name__


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *constraints = typing.get_args(annotation)
        return f"{_type_name(base)} {' and '.join(_range_text(c) for c in constraints)}".strip()
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(repr(m.value) for m in annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    if annotation is _MISSING:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


CODE_PREFIX = "code:"
"""How a record names a hyperparameter value that was code: ``code:<module>.<qualified name>``."""


def holds_code(value: Any) -> bool:
    """Whether ``value`` is, or holds (in a list, tuple or mapping), a function, class or callable object."""
    if isinstance(value, Mapping):
        return any(holds_code(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_code(v) for v in value)
    return callable(value)


def recorded(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a run's record keeps them: code given from Python (a reward function, a callable object) is
    written as its name, ``code:<module>.<qualname>`` — a record is data, never code to import — and everything else
    as it is."""
    def one(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: one(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [one(v) for v in value]
        if callable(value):
            named = value if inspect.isfunction(value) or inspect.isclass(value) else type(value)
            return f"{CODE_PREFIX}{named.__module__}.{named.__qualname__}"
        return value

    return {name: one(value) for name, value in values.items()}
