"""Core's own components, registered through the same hooks as any third-party plugin.

This module is the plugin named ``twinkle-core``. Like every plugin module it imports nothing heavy: each
target is a ``"module:attr"`` string imported only when used.
"""

from __future__ import annotations

from twinkle_core.hookspecs import Register, hookimpl
