"""The errors Twinkle raises.

Every error Twinkle raises on purpose is a :class:`TwinkleError`. Its message names the thing that is
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


class RegistrationError(PluginError):
    """A plugin called ``register`` with bad arguments (empty name, bad target, missing meta)."""


class UnknownComponentError(TwinkleError, LookupError):
    """No installed plugin registered a component under the requested name."""


class AmbiguousComponentError(TwinkleError, LookupError):
    """Two or more plugins registered the same name; the user must say ``plugin:name``."""


class UnknownTaskError(TwinkleError, ValueError):
    """A task name that no installed algorithm or the core knows."""


__all__ = [
    "AmbiguousComponentError",
    "PluginError",
    "PluginLoadError",
    "RegistrationError",
    "TwinkleError",
    "UnknownComponentError",
    "UnknownTaskError",
]
