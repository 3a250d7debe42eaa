"""The Twinkle plugin of twinkle-vision, found through the ``twinkle`` entry-point group.

It provides the ResNet family (timm) and YOLO v8/11 detectors (ultralytics). It registers no components yet: they arrive with the vision issue.

Like every Twinkle plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations
