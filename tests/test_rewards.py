"""Rewards as an extension point (``register_rewards``, ``twinkle_core.rewards``): a plugin's reward is found by
name, built with its options and weighted; code may pass functions; everything a reward can get wrong is a named
``RewardError`` (the reward and the prompt named) before a score is used; the contract checks a reward's target."""

from __future__ import annotations

import math

import pytest

from twinkle_core import hookimpl
from twinkle_core.errors import UnknownComponentError
from twinkle_core.rewards import Reward, RewardError, resolve_rewards, score
from twinkle_core.testing import check_plugin_contract, registered_plugin


class Shouts(Reward):
    """1 per exclamation mark, up to ``cap``."""

    def __init__(self, cap: int = 3) -> None:
        self.cap = cap

    def __call__(self, completions, rows):
        return [min(text.count("!"), self.cap) for text in completions]


class NotAReward:
    """A class that is no ``Reward``."""


class RewardPlugin:
    """A plugin with one reward."""

    @hookimpl
    def register_rewards(self, register):
        """``shouts``."""
        register("shouts", Shouts, description="exclamation marks")


class BadRewardPlugin:
    """A plugin whose reward is no ``Reward``."""

    @hookimpl
    def register_rewards(self, register):
        """``bad``."""
        register("bad", NotAReward, description="not a reward")


ROWS = [{"prompt": "say it", "answer": "!"}, {"prompt": "again", "answer": "!!"}]


def test_a_registered_reward_is_built_with_its_options_and_weighted_with_code_functions() -> None:
    """``{"name": "shouts", "cap": 1}`` builds ``Shouts(cap=1)``; a function from code joins it; ``score`` gives the
    weighted sums and each reward's own scores (booleans and ints read as floats)."""
    with registered_plugin(RewardPlugin(), name="rewarding"):
        def polite(completions, rows):
            return ["please" in text for text in completions]

        rewards = resolve_rewards([{"name": "shouts", "weight": 0.5, "cap": 1}, polite])
        assert [(r.name, r.weight) for r in rewards] == [("shouts", 0.5), ("polite", 1.0)]
        total, parts = score(rewards, ["please!!!", "no"], ROWS)
        assert parts == {"shouts": [1.0, 0.0], "polite": [1.0, 0.0]} and total == [1.5, 0.0]
        assert [r.name for r in resolve_rewards({"shouts": 2.0})] == ["shouts"]
        assert check_plugin_contract("rewarding").ok


@pytest.mark.parametrize(("given", "error", "message"), [
    (None, RewardError, "no reward given"),
    ({"shouts": "heavy"}, RewardError, "weight 'heavy': give a finite number"),
    ({"shouts": math.inf}, RewardError, "weight inf"),
    ({"name": "shouts", "volume": 11}, RewardError, "reward 'shouts' was given volume"),
    ("whisper", UnknownComponentError, "whisper"),
    ([42], RewardError, "neither a registered name nor callable"),
])
def test_what_cannot_be_a_reward_is_named_before_anything_scores(given, error, message) -> None:
    """Nothing given, weights that are not finite numbers, an option the reward does not take, an unregistered
    name and an object that cannot be called are refused by ``resolve_rewards`` with the offending value named."""
    with registered_plugin(RewardPlugin(), name="rewarding"), pytest.raises(error, match=message):
        resolve_rewards(given)


def test_a_reward_that_raises_miscounts_or_is_not_finite_names_itself_and_the_prompt() -> None:
    """A reward's exception, a score count that differs from the completions' and a value that is not a finite
    number are ``RewardError``s naming the reward and the prompt (by its row's ``prompt``)."""
    def crashes(completions, rows):
        raise KeyError("answer")

    def short(completions, rows):
        return [1.0]

    def infinite(completions, rows):
        return [1.0, math.inf]

    with pytest.raises(RewardError, match="reward 'crashes' raised KeyError: 'answer'.*'say it'"):
        score(resolve_rewards(crashes), ["a", "b"], ROWS)
    with pytest.raises(RewardError, match="reward 'short' returned 1 scores for 2 completions"):
        score(resolve_rewards(short), ["a", "b"], ROWS)
    with pytest.raises(RewardError, match="reward 'infinite' gave inf to the completion of prompt 'again' \\(#1\\)"):
        score(resolve_rewards(infinite), ["a", "b"], ROWS)


def test_the_contract_flags_a_reward_target_that_is_no_reward_class() -> None:
    """``check_plugin_contract`` reports a registered reward whose target does not subclass ``Reward``."""
    with registered_plugin(BadRewardPlugin(), name="bad-rewards"):
        report = check_plugin_contract("bad-rewards")
    assert any("is not a subclass of Reward" in problem for problem in report.problems), report.problems
