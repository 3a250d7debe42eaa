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


@pytest.mark.parametrize(("tokens", "inputs", "message"), [
    (["a", "b"], {}, r"data\[0\]\.model_input has 'a', which is not a token id"),
    ([1, 2], {"target_tokens": [1.5, 2]}, r"target_tokens'\] has 1\.5, which is not a token id"),
    ([1, -3], {}, r"model_input has token id -3, outside the model's vocabulary \(0–9\)"),
    ([1, 2], {"weights": [1.0, float("nan")]}, r"\['weights'\] has nan at position 1: give finite numbers"),
    ([1, 2], {"weights": [1.0, -1.0]}, r"\['weights'\] has -1 at position 1: weights must be 0 or more"),
    ([1, 2], {"advantages": [float("inf"), 0.0]}, r"\['advantages'\] has inf at position 0"),
    ([1, 2], {"logprobs": ["x", "y"]}, r"\['logprobs'\] has 'x', which is not a number"),
])
def test_check_data_refuses_what_would_poison_a_step_by_name(tokens, inputs, message) -> None:
    """Token ids given as strings or fractions, ids outside the vocabulary, NaN or infinite inputs and negative
    weights (which would train a model away from its targets, or make its loss NaN for good) are each a named
    error before anything runs; whole-number float ids and zero weights are accepted."""
    import numpy as np

    from twinkle_core.lowlevel import Datum, check_data

    datum = Datum(tokens, {"target_tokens": np.array([2, 3]), **{k: np.asarray(v) for k, v in inputs.items()}})
    with pytest.raises(TwinkleError, match=message):
        check_data([datum], 10)
    check_data([Datum([1.0, 2.0], {"target_tokens": np.array([2, 3]), "weights": np.array([0.0, 1.0])})], 10)
