"""Value types (public API): hyperparameter types with their ranges, for the typed keywords of ``__init__``, and
``TextEnum`` for closed sets of names (run status, job state).

A range is an ``annotated_types`` constraint inside ``typing.Annotated`` — the convention pydantic uses — so
an algorithm or processor declares it where it declares the type:

```python
from typing import Annotated
from annotated_types import Interval
from twinkle_core.types import PositiveFloat, Probability

class MyNet(Algorithm):
    def __init__(self, width: PositiveInt = 64, dropout: Probability = 0.1,
                 temperature: Annotated[float, Interval(gt=0, le=10)] = 1.0) -> None: ...
```

A value outside the range is a ``HyperparameterError`` naming the key, the value and the range, raised
before any run is created.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Any

from annotated_types import Ge, Gt, Interval, Le, Lt

PositiveFloat = Annotated[float, Gt(0), Lt(math.inf)]
"""A finite number > 0 (learning rates, clip norms)."""

NonNegativeFloat = Annotated[float, Ge(0), Lt(math.inf)]
"""A finite number >= 0 (weight decay)."""

PositiveInt = Annotated[int, Ge(1)]
"""An integer >= 1 (batch sizes, epochs, widths)."""

NonNegativeInt = Annotated[int, Ge(0)]
"""An integer >= 0 (worker processes, seeds)."""

Probability = Annotated[float, Interval(ge=0, lt=1)]
"""A share in [0, 1) (dropout, momentum)."""

Fraction = Annotated[float, Interval(gt=0, lt=1)]
"""A share in (0, 1), neither end (a validation fraction)."""



class TextEnum(str, Enum):
    """A closed set of names, each stored, sent and shown as its text: a member equals its text
    (``RunStatus.FINISHED == "finished"``), and ``str()``, f-strings and JSON give the text."""

    def __str__(self) -> str:
        """The member's text."""
        return str(self.value)


def plain(value: Any) -> Any:
    """``value`` with every ``Enum`` member, also inside dicts, lists and tuples, replaced by its value: what
    ``torch.load(weights_only=True)`` and JSON read back as they were written."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item) for item in value)
    return value


__all__ = ["Fraction", "Ge", "Gt", "Interval", "Le", "Lt", "NonNegativeFloat", "NonNegativeInt", "PositiveFloat",
           "PositiveInt", "Probability", "TextEnum"]
