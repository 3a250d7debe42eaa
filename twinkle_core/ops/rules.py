"""Alert rules: a small grammar over a metric's history.

=====================================  =====================================================================
rule                                   fires when
=====================================  =====================================================================
``nan``                                the value is NaN or infinite
``> X``, ``>= X``, ``< X``, ``<= X``   the value crosses the threshold
``stale > N epochs`` (or ``steps``)    the metric has not improved for more than N epochs (steps)
``increase > X% over N epochs``        the value rose by more than X % against N epochs (steps) earlier
=====================================  =====================================================================

"Improved" means lower for losses and errors (names containing ``loss``, ``error``, ``mae``, ``mse``,
``rmse``, ``perplexity``) and higher for everything else. Spaces are optional (``stale > 3epochs``). A
rule fires once when its condition becomes true and re-arms when it becomes false.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from twinkle_core.errors import TwinkleError

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_UNIT = r"(epochs?|steps?)"
_PATTERNS = {
    "nan": re.compile(r"^nan$"),
    "compare": re.compile(rf"^(>=|<=|>|<)\s*({_NUMBER})$"),
    "stale": re.compile(rf"^stale\s*>\s*(\d+)\s*{_UNIT}$"),
    "increase": re.compile(rf"^increase\s*>\s*({_NUMBER})\s*%\s*over\s*(\d+)\s*{_UNIT}$"),
}
_LOWER_IS_BETTER = ("loss", "error", "mae", "mse", "rmse", "perplexity")


class AlertRuleError(TwinkleError, ValueError):
    """An alert rule that does not parse; the message names the metric, the rule and the grammar."""


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of ``metric`` are improvements."""
    return any(word in metric.lower() for word in _LOWER_IS_BETTER)


@dataclass
class Rule:
    """A parsed rule on one metric, with the state needed to evaluate it.

    Attributes:
        metric: the metric name as the user wrote it (``"loss"``).
        text: the rule as written.
        kind: ``nan``, ``compare``, ``stale`` or ``increase``.
        unit: ``epoch`` or ``step`` — when the rule is evaluated.
        op: the comparison (``compare``).
        threshold: X (``compare``, ``increase``) or N (``stale``).
        window: N of ``increase ... over N``.
        action: ``log`` or ``stop``.
    """

    metric: str
    text: str
    kind: str
    unit: str = "epoch"
    op: str = ""
    threshold: float = 0.0
    window: int = 0
    action: str = "log"
    _history: list[float] = field(default_factory=list, repr=False)
    _best: float | None = field(default=None, repr=False)
    _since_best: int = field(default=0, repr=False)
    _firing: bool = field(default=False, repr=False)

    def observe(self, value: float, metric_name: str) -> str | None:
        """Take the next value; return a message when the rule starts firing, else ``None``."""
        condition, detail = self._condition(value, metric_name)
        fire = condition and not self._firing
        self._firing = condition
        if not fire:
            return None
        return f"{metric_name} = {value:.6g}: '{self.text}' ({detail})"

    def _condition(self, value: float, name: str) -> tuple[bool, str]:
        self._history.append(value)
        if self.kind == "nan":
            return (math.isnan(value) or math.isinf(value)), "not a finite number"
        if self.kind == "compare":
            hit = {">": value > self.threshold, ">=": value >= self.threshold,
                   "<": value < self.threshold, "<=": value <= self.threshold}[self.op]
            return hit, f"threshold {self.threshold:g}"
        if self.kind == "stale":
            better = self._best is None or (value < self._best if lower_is_better(name) else value > self._best)
            if better and not math.isnan(value):
                self._best, self._since_best = value, 0
            else:
                self._since_best += 1
            best = "nothing finite" if self._best is None else f"{self._best:.6g}"
            return self._since_best > self.threshold, f"no improvement on {best} for {self._since_best} {self.unit}s"
        if len(self._history) <= self.window:
            return False, ""
        before = self._history[-1 - self.window]
        change = (value - before) / abs(before) * 100 if before else math.inf if value > before else 0.0
        return change > self.threshold, f"+{change:.1f}% over {self.window} {self.unit}s"


def parse_rule(metric: str, text: str, action: str = "log") -> Rule:
    """Parse one rule (see the module docstring).

    Raises:
        AlertRuleError: the rule does not parse, or the action is unknown; the message shows the grammar.
    """
    if action not in ("log", "stop"):
        raise AlertRuleError(f"alert action for '{metric}' must be 'log' or 'stop', got {action!r}")
    cleaned = " ".join(str(text).strip().lower().split())
    for kind, pattern in _PATTERNS.items():
        match = pattern.match(cleaned)
        if not match:
            continue
        if kind == "nan":
            return Rule(metric, text, "nan", action=action)
        if kind == "compare":
            return Rule(metric, text, "compare", op=match[1], threshold=float(match[2]), action=action)
        if kind == "stale":
            return Rule(metric, text, "stale", unit=match[2].rstrip("s"), threshold=int(match[1]), action=action)
        return Rule(metric, text, "increase", unit=match[3].rstrip("s"), threshold=float(match[1]),
                    window=int(match[2]), action=action)
    raise AlertRuleError(
        f"alert rule for '{metric}' cannot be parsed: {text!r}. Write one of: 'nan', '> 0.5', '< 0.1', "
        "'stale > 3 epochs', 'stale > 100 steps', 'increase > 20% over 2 epochs'"
    )
