"""The Tinker API's built-in losses (``twinkle_core.lowlevel.losses``) compute what their definitions say, on
numbers worked out by hand, and an unknown loss is named."""

from __future__ import annotations

import math

import pytest
import torch

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import LOSSES, get_loss


def test_cross_entropy_weights_each_tokens_negative_logprob() -> None:
    """``-logprob × weight`` per token (weights default to 1), summed."""
    logprobs = torch.tensor([-1.0, -2.0, -0.5])
    elementwise, total = get_loss("cross_entropy")(logprobs, {"weights": torch.tensor([1.0, 0.0, 2.0])}, {})
    assert elementwise.tolist() == [1.0, 0.0, 1.0] and float(total) == 2.0
    _, unweighted = get_loss("cross_entropy")(logprobs, {}, {})
    assert float(unweighted) == 3.5


def test_importance_sampling_scales_the_advantage_by_the_probability_ratio() -> None:
    """``-exp(logprob - sampler logprob) × advantage``: equal log-probabilities give ``-advantage``; a token twice
    as likely now as when sampled doubles its term."""
    inputs = {"logprobs": torch.tensor([-1.0, -1.0 - math.log(2.0)]), "advantages": torch.tensor([0.5, 1.0])}
    elementwise, total = get_loss("importance_sampling")(torch.tensor([-1.0, -1.0]), inputs, {})
    assert elementwise.tolist() == pytest.approx([-0.5, -2.0]) and float(total) == pytest.approx(-2.5)


def test_ppo_clips_the_ratio_to_its_thresholds() -> None:
    """With a ratio of 2 and a positive advantage the clipped term (1.2 × A) wins; with a negative advantage the
    unclipped one (2 × A) does (the pessimistic minimum); thresholds come from the loss's settings."""
    inputs = {"logprobs": torch.tensor([0.0, 0.0]), "advantages": torch.tensor([1.0, -1.0])}
    now = torch.tensor([math.log(2.0), math.log(2.0)])
    elementwise, _ = get_loss("ppo")(now, inputs, {})
    assert elementwise.tolist() == pytest.approx([-1.2, 2.0])
    wider, _ = get_loss("ppo")(now, inputs, {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5})
    assert wider.tolist() == pytest.approx([-1.5, 2.0])


def test_an_unknown_loss_is_named_with_the_known_ones() -> None:
    """A loss name that does not exist is a ``TwinkleError`` listing every built-in loss."""
    with pytest.raises(TwinkleError, match="loss_fn 'mystery' does not exist; use one of " + ", ".join(LOSSES)):
        get_loss("mystery")
