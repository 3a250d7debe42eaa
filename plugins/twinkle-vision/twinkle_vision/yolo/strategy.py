"""The detection resource strategy: mixed precision where the device has it, accumulation to a nominal batch of 64.

As ultralytics does: gradients accumulate over ``max(round(64 / micro_batch), 1)`` micro-batches unless the run
asks for an ``effective_batch_size`` of its own (ultralytics' ``nbs``); on GPUs training runs in bf16 (or fp16 with loss scaling). Both are
core deciders replaced through the public planning API; every other concern is the default's.
"""

from __future__ import annotations

from twinkle_core.planning import BatchingDecider, DefaultStrategy, PlanDraft, PrecisionDecider

NOMINAL_BATCH = 64


class NominalBatchDecider(BatchingDecider):
    """The default micro-batch, then accumulation to a nominal batch of 64 (YOLO's recipe) — unless the run
    asks for its own ``effective_batch_size``, which is kept (ultralytics' ``nbs``)."""

    def decide(self, draft: PlanDraft) -> None:
        """Decide the micro-batch as the default does, then the accumulation (unless the user fixed it)."""
        super().decide(draft)
        if draft.context.effective_batch_size is not None:  # the default decided it from the request
            return
        micro, workers = int(draft["micro_batch_size"]), draft.world_size
        accumulate = max(round(NOMINAL_BATCH / (micro * workers)), 1)
        draft.decide("accumulate_grad_batches", accumulate,
                     f"YOLO: accumulate to a nominal batch of {NOMINAL_BATCH} "
                     f"({micro} × {workers} × {accumulate} = {micro * workers * accumulate})")


class DetectionPrecisionDecider(PrecisionDecider):
    """Mixed precision on any GPU with fast 16-bit arithmetic (ultralytics' AMP), fp32 on CPU."""

    def decide(self, draft: PlanDraft) -> None:
        """Decide ``precision``."""
        c = draft.context
        hw = c.hardware
        if hw.accelerator != "cpu" and (hw.bf16 or hw.fp16):
            draft.decide("precision", "bf16-mixed" if hw.bf16 else "16-mixed", f"YOLO: mixed precision on {hw.device_name}")
        else:
            super().decide(draft)


class DetectionStrategy(DefaultStrategy):
    """The default rules with YOLO's batching and precision deciders."""

    name = "yolo-detection"
    deciders = DefaultStrategy.replacing(batching=NominalBatchDecider(), precision=DetectionPrecisionDecider())
