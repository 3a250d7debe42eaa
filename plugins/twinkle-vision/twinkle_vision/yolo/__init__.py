"""YOLO v8/11 detectors built from ultralytics' configurations, trained inside Twinkle's Lightning engine.

ultralytics is AGPL-3.0 and an optional extra (``pip install "twinkle-vision[yolo]"``); nothing in this
package imports it until a YOLO component is used, and ``twinkle_vision.yolo.offline`` is applied first.
"""
