"""Core's built-in algorithms (registered by the ``twinkle-core`` plugin in ``twinkle_core.builtins``)."""
