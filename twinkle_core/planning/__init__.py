"""Resource planning: measure the model and data, look at the hardware and history, choose how to train."""

from twinkle_core.planning.estimate import ModelFacts, PlanningError, measure, measure_example
from twinkle_core.planning.hardware import Hardware
from twinkle_core.planning.plan import Decision, Plan
from twinkle_core.planning.strategy import DefaultStrategy, PlanContext, ResourceStrategy

__all__ = ["Decision", "DefaultStrategy", "Hardware", "ModelFacts", "Plan", "PlanningError", "PlanContext", "ResourceStrategy", "measure", "measure_example"]
