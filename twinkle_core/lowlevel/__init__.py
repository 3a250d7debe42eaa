"""Step-by-step training for clients that write their own loop (the Tinker protocol in ``twinkle serve``): the
backend a plugin implements (``TrainingBackend``), the values it exchanges, and the built-in losses."""

from twinkle_core.lowlevel.backend import (
    AdamSettings,
    BaseModel,
    Datum,
    ForwardRequest,
    ForwardResult,
    Loss,
    LoraSettings,
    PromptScores,
    SampleSettings,
    ScoresWanted,
    Sequence,
    TrainingBackend,
    check_data,
)
from twinkle_core.lowlevel.losses import LOSSES, get_loss

__all__ = ["AdamSettings", "BaseModel", "Datum", "ForwardRequest", "ForwardResult", "LOSSES", "Loss", "LoraSettings",
           "PromptScores", "SampleSettings", "ScoresWanted", "Sequence", "TrainingBackend", "check_data", "get_loss"]
