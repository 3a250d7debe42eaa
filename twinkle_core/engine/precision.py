"""Lightning's mixed precision with gradient clipping under torch's fused optimizers.

Twinkle builds its optimizers with torch's fused kernels (``Algorithm.optimizer_kernel``), and chooses bf16-mixed
wherever it measured it faster (``PrecisionDecider``). Lightning's ``MixedPrecision`` refuses to clip the gradients
of an optimizer that unscales them inside its own step (a fused one) — in every 16-bit precision, though only fp16
scales gradients: a bf16-mixed run of an algorithm that clips (YOLO clips at 10) would stop at its first step.

``ClippingMixedPrecision`` clips as torch's AMP recipe does: under bf16 (no loss scaler) the gradients are already
true and are clipped as they are; under fp16 the scaler unscales them first (``GradScaler.unscale_``), and the fused
step then sees them unscaled and does not unscale again.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch.optim import Optimizer


class ClippingMixedPrecision(MixedPrecision):
    """``MixedPrecision`` that clips the gradients of fused optimizers (see the module docstring)."""

    def clip_gradients(self, optimizer: Optimizer, clip_val: int | float = 0.0,
                       gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM) -> None:
        """Clip to ``clip_val``: unscaled first under fp16 when the optimizer's step would unscale them itself."""
        if clip_val > 0 and getattr(optimizer, "_step_supports_amp_scaling", False):
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)
            return
        super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)


def precision_plugin(precision: str, accelerator: str, strategy: str) -> Any | None:
    """The precision plugin a run passes to Lightning in place of its ``precision`` flag, or ``None`` where
    Lightning's own applies: 16-bit mixed precision under a strategy that uses ``MixedPrecision`` (one device or
    DDP; FSDP2, DeepSpeed and pipeline stages bring their own)."""
    if precision not in ("bf16-mixed", "16-mixed") or strategy not in ("auto", "ddp"):
        return None
    return ClippingMixedPrecision(precision, "cuda" if accelerator in ("cuda", "gpu") else "cpu")  # type: ignore[arg-type]


__all__ = ["ClippingMixedPrecision", "precision_plugin"]
