"""One training in this process: ``Session`` (select and check, prepare, plan, fit) and the concerns it hands to
connectors, as Lightning's trainer does — ``RunRecorder`` (the run in the store) and ``TrainedModel`` (export,
evaluate, predict on the model it trained)."""

from twinkle_core.session.recording import RunRecorder
from twinkle_core.session.session import Prepared, Session
from twinkle_core.session.trained import TrainedModel

__all__ = ["Prepared", "RunRecorder", "Session", "TrainedModel"]
