"""Rewards for reinforcement learning: what each sampled completion earns.

A reward is a ``Reward`` — registered by a plugin (``register_rewards``: ``twinkle rewards list`` shows them) or
passed from code — called with a batch of completions and the data rows of the prompts they answer (every field of
a prompt's row beyond the prompt itself: ``answer``, ``tests``, ...), returning one number per completion. A
training combines several with weights (``resolve_rewards``: ``"exact_answer"``, ``["exact_answer", "format"]``,
``{"exact_answer": 1.0, "format": 0.2}``, ``[{"name": "length_penalty", "weight": 0.1, "limit": 64}]``, a
``Reward`` or a plain function), and ``score`` runs them: a reward that raises, returns the wrong number of values
or a value that is not a finite number is a ``RewardError`` naming the reward and the prompt.

Everything here is light (no torch): rewards run beside the sampler, in any process.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinkle_core.errors import TwinkleError
from twinkle_core.hyperparams import CODE_PREFIX
from twinkle_core.lookup import get_component


class RewardError(TwinkleError):
    """A reward could not score a completion: it raised, returned a number that is not finite, or returned another
    number of values than completions; the message names the reward and the prompt."""


class Reward:
    """A reward function (subclass it and register it with ``register_rewards``).

    ``__init__`` takes the reward's options as keywords (``ExactAnswer(field="answer")``), ``__call__`` scores a
    batch. Scores are plain floats; higher is better.
    """

    def __call__(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> Sequence[float]:
        """One score per completion; ``rows[i]`` is the data row of the prompt ``completions[i]`` answers."""
        raise NotImplementedError


RewardFunction = Callable[[Sequence[str], Sequence[Mapping[str, Any]]], Sequence[float]]
"""What ``score`` calls: a ``Reward`` or any function of the same shape."""


@dataclass(frozen=True)
class WeightedReward:
    """One reward of a combination.

    Attributes:
        name: its registered name, or the function's or class's name for one given from code.
        weight: what its score counts for in the sum.
        reward: the callable.
    """

    name: str
    weight: float
    reward: RewardFunction


def resolve_rewards(given: Any) -> list[WeightedReward]:
    """The rewards ``given`` names, each with its weight (1 unless given), built with its options.

    ``given`` is a registered name, a ``Reward`` or function, a ``{name: weight}`` mapping, or a list of any of
    these and of ``{"name": ..., "weight": ..., **options}`` mappings.

    Raises:
        RewardError: nothing given, a weight that is not a finite number, options for a reward given as an object.
        UnknownComponentError: a name no plugin registered (the registered ones listed).
    """
    if given is None or given == [] or given == {}:
        raise RewardError("no reward given: name one (twinkle rewards list) or pass a function "
                          "(completions, rows) -> scores")
    if isinstance(given, Mapping) and "name" not in given:
        items: list[Any] = [{"name": name, "weight": weight} for name, weight in given.items()]
    elif isinstance(given, (list, tuple)):
        items = list(given)
    else:
        items = [given]
    return [_one(item) for item in items]


def _one(item: Any) -> WeightedReward:
    """One item of ``resolve_rewards``'s list."""
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, Mapping):  # code: a Reward or a function
        if not callable(item):
            raise RewardError(f"reward {item!r} is neither a registered name nor callable")
        name = getattr(item, "__name__", None) or type(item).__name__
        return WeightedReward(name, 1.0, item)
    options = dict(item)
    name, weight = options.pop("name", None), options.pop("weight", 1.0)
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        weight = math.nan
    if not math.isfinite(weight):
        raise RewardError(f"reward '{name}' has weight {item.get('weight')!r}: give a finite number")
    if callable(name):
        if options:
            raise RewardError(f"reward {name!r} is an object: configure it before passing it, not with "
                              f"{', '.join(sorted(options))}")
        return WeightedReward(getattr(name, "__name__", type(name).__name__), weight, name)
    if not isinstance(name, str):
        raise RewardError(f"a reward mapping needs 'name' (a registered reward), not {name!r}")
    if name.startswith(CODE_PREFIX):
        raise RewardError(f"reward '{name}' was a function given in code to the run this one continues (a record "
                          "keeps its name, never the code): pass rewards= again")
    target = get_component("reward", name).load()
    if inspect.isclass(target):
        try:
            return WeightedReward(name, weight, target(**options))
        except TypeError as err:  # an option it does not take, or one it needs and was not given
            given = f"was given {', '.join(sorted(options))}" if options else "was given no options"
            raise RewardError(f"reward '{name}' {given}: {err}; pass its options as "
                              f"{{'name': '{name}', 'weight': ..., <option>: ...}}") from None
    if options:
        raise RewardError(f"reward '{name}' takes no options; it was given {', '.join(sorted(options))}")
    return WeightedReward(name, weight, target)


def score(rewards: Sequence[WeightedReward], completions: Sequence[str], rows: Sequence[Mapping[str, Any]],
          prompts: Sequence[str] | None = None) -> tuple[list[float], dict[str, list[float]]]:
    """Score each completion with every reward: the weighted sums and each reward's own scores.

    Args:
        rewards: what ``resolve_rewards`` gave.
        completions: the sampled texts.
        rows: each completion's prompt row (its extra fields: the answer, the tests).
        prompts: each completion's prompt, to name it in an error (default: the row's ``prompt``).

    Raises:
        RewardError: a reward raised, returned another number of values than completions, or a value that is not a
            finite number — naming the reward and the first prompt concerned.
    """
    if len(rows) != len(completions):
        raise RewardError(f"{len(completions)} completions but {len(rows)} prompt rows")
    named = list(prompts) if prompts is not None else [str(row.get("prompt", "")) for row in rows]
    total = [0.0] * len(completions)
    parts: dict[str, list[float]] = {}
    for weighted in rewards:
        try:
            values = list(weighted.reward(list(completions), list(rows)))
        except RewardError:
            raise
        except Exception as err:  # noqa: BLE001 — whatever a reward raises is named with the reward and prompts
            raise RewardError(f"reward '{weighted.name}' raised {type(err).__name__}: {err} (scoring a batch "
                              f"whose first prompt is {_short(named[0]) if named else '(none)'})") from err
        if len(values) != len(completions):
            raise RewardError(f"reward '{weighted.name}' returned {len(values)} scores for {len(completions)} "
                              "completions: return one per completion")
        for i, value in enumerate(values):
            number = _number(value)
            if number is None:
                raise RewardError(f"reward '{weighted.name}' gave {value!r} to the completion of prompt "
                                  f"{_short(named[i])} (#{i}): return a finite number")
            values[i] = number
            total[i] += weighted.weight * number
        parts[weighted.name] = values
    return total, parts


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None``."""
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _short(text: str, limit: int = 60) -> str:
    """A prompt, quoted and cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


__all__ = ["Reward", "RewardError", "RewardFunction", "WeightedReward", "resolve_rewards", "score"]
