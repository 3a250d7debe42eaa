"""The Twinkle plugin of twinkle-edge, found through the ``twinkle`` entry-point group.

It provides the edge toolchain: structured pruning, INT8 quantization and RK3588 conversion (the ``rknn`` exporter). It registers no components yet: they arrive with the edge issue.

Like every Twinkle plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations
