"""The errors Twinkle raises.

Every error Twinkle raises on purpose is a ``TwinkleError``. Its message names the thing that is
wrong (a file, row, key, plugin or component) and says how to fix it. The CLI prints such errors as one
line, without a traceback, and exits non-zero.
"""

from __future__ import annotations


class TwinkleError(Exception):
    """Base class of every error Twinkle raises on purpose.

    Example:
        >>> try:
        ...     raise TwinkleError("data file 'x.csv' not found; check the path")
        ... except TwinkleError as err:
        ...     print(err)
        data file 'x.csv' not found; check the path
    """


class PluginError(TwinkleError):
    """A plugin could not be loaded, or registered something invalid."""


class PluginLoadError(PluginError):
    """A plugin's module, or a component's ``module:attr`` target, failed to import."""


class IncompatiblePluginError(PluginLoadError):
    """A plugin whose distribution declares a ``twinkle-core`` range that the installed core is outside of."""


class RegistrationError(PluginError):
    """A plugin called ``register`` with bad arguments (empty name, bad target, missing meta)."""


class UnknownComponentError(TwinkleError, LookupError):
    """No installed plugin registered a component under the requested name."""


class AmbiguousComponentError(TwinkleError, LookupError):
    """Two or more plugins registered the same name; the user must say ``plugin:name``."""


class UnknownTaskError(TwinkleError, ValueError):
    """A task name that no registered task matches."""


class HyperparameterError(TwinkleError, ValueError):
    """An unknown hyperparameter, or a value of the wrong type or outside its choices."""


# Errors defined beside the code that raises them, importable from here too (imported on first access, so
# ``import twinkle_core.errors`` stays light): name -> "module:attr".
_ELSEWHERE: dict[str, str] = {
    "DataError": "twinkle_core.data.errors:DataError",
    "EmptyDataError": "twinkle_core.data.errors:EmptyDataError",
    "MissingColumnError": "twinkle_core.data.errors:MissingColumnError",
    "MissingValueError": "twinkle_core.data.errors:MissingValueError",
    "NonNumericError": "twinkle_core.data.errors:NonNumericError",
    "UnsupportedFormatError": "twinkle_core.data.errors:UnsupportedFormatError",
    "DataNotFoundError": "twinkle_core.uris:DataNotFoundError",
    "StorePathError": "twinkle_core.uris:StorePathError",
    "DataVerificationError": "twinkle_core.ops.verify:DataVerificationError",
    "DataChangedError": "twinkle_core.engine.continuation:DataChangedError",
    "AlertRuleError": "twinkle_core.ops.rules:AlertRuleError",
    "BudgetError": "twinkle_core.ops.budget:BudgetError",
    "SearchSpaceError": "twinkle_core.ops.tuning:SearchSpaceError",
    "PlanningError": "twinkle_core.planning.estimate:PlanningError",
    "CheckpointError": "twinkle_core.engine.checkpoints:CheckpointError",
    "UnsafeCheckpointError": "twinkle_core.engine.checkpoints:UnsafeCheckpointError",
    "ExportError": "twinkle_core.exporting.base:ExportError",
    "ExportVerificationError": "twinkle_core.exporting.base:ExportVerificationError",
    "RunNotFoundError": "twinkle_core.store.runs:RunNotFoundError",
}


def __getattr__(name: str) -> type[TwinkleError]:
    """Import an error defined elsewhere on first access (see ``__all__`` for every error)."""
    if name in _ELSEWHERE:
        import importlib

        module, _, attr = _ELSEWHERE[name].partition(":")
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value  # type: ignore[no-any-return]
    raise AttributeError(f"module 'twinkle_core.errors' has no attribute '{name}'")


__all__ = [
    "AmbiguousComponentError",
    "HyperparameterError",
    "IncompatiblePluginError",
    "PluginError",
    "PluginLoadError",
    "RegistrationError",
    "TwinkleError",
    "UnknownComponentError",
    "UnknownTaskError",
    *_ELSEWHERE,
]
