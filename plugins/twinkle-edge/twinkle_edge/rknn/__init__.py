"""RKNN conversion for Rockchip NPUs through rknn-toolkit2, which cannot share Twinkle's environment (it pins
numpy ≤ 1.26.4, onnx ≤ 1.18, protobuf ≤ 4.25.4, setuptools < 81): it lives in a converter venv of its own
(``twinkle_edge.rknn.venv``, made by ``twinkle edge setup``) and is driven as a subprocess with JSON in and
out (``twinkle_edge.rknn.worker``)."""
