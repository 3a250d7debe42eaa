"""Core's built-in algorithms (registered by the ``twinkle-core`` plugin in :mod:`twinkle_core.builtins`)."""
