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


def _random_tokens(seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    now = -torch.rand(12, generator=generator, dtype=torch.float64) * 3
    sampled = now + (torch.rand(12, generator=generator, dtype=torch.float64) - 0.5)  # ratios 0.6 … 1.6
    advantages = torch.randn(12, generator=generator, dtype=torch.float64)
    return now, {"logprobs": sampled, "advantages": advantages}


def test_cispo_weighs_each_tokens_gradient_by_its_clipped_ratio_as_published() -> None:
    """CISPO (MiniMax-M1; Tinker's definition): the loss equals ``-Σ clip(p/q, low, high) × log p × A`` computed
    independently in NumPy (within 1e-6), and its gradient with respect to each log-probability is
    ``-clip(ratio) × A`` — the ratio is a constant, and clipped tokens still get a gradient (PPO's would be 0)."""
    import numpy as np

    now, inputs = _random_tokens(0)
    for settings, (low, high) in (({}, (0.8, 1.2)), ({"clip_low_threshold": 0.5, "clip_high_threshold": 1.1},
                                                    (0.5, 1.1))):
        lp = now.clone().requires_grad_(True)
        elementwise, total = get_loss("cispo", settings)(lp, inputs, settings)
        q, a = inputs["logprobs"].numpy(), inputs["advantages"].numpy()
        clipped = np.clip(np.exp(now.numpy() - q), low, high)
        assert float(total) == pytest.approx(float(-(clipped * now.numpy() * a).sum()), abs=1e-6)
        total.backward()
        assert np.allclose(lp.grad.numpy(), -clipped * a, atol=1e-9)
        assert elementwise.shape == now.shape


def test_dro_is_the_advantage_weighted_logprob_less_a_quadratic_drift_penalty_as_published() -> None:
    """DRO (Richemond et al. 2024; Tinker's definition): ``-Σ (log p × A - ½ β (log p - log q)²)`` computed
    independently (within 1e-6) for the default β = 0.05 and a given one; its gradient is ``-(A - β (log p -
    log q))``."""
    import numpy as np

    now, inputs = _random_tokens(1)
    q, a = inputs["logprobs"].numpy(), inputs["advantages"].numpy()
    for settings, beta in (({}, 0.05), ({"beta": 0.5}, 0.5)):
        lp = now.clone().requires_grad_(True)
        _, total = get_loss("dro", settings)(lp, inputs, settings)
        expected = -(now.numpy() * a - 0.5 * beta * (now.numpy() - q) ** 2).sum()
        assert float(total) == pytest.approx(float(expected), abs=1e-6)
        total.backward()
        assert np.allclose(lp.grad.numpy(), -(a - beta * (now.numpy() - q)), atol=1e-9)


@pytest.mark.parametrize(("loss", "settings", "message"), [
    ("ppo", {"clip_low_threshold": 1.5, "clip_high_threshold": 1.2}, "clip_low_threshold=1.5 and "
                                                                     "clip_high_threshold=1.2"),
    ("cispo", {"clip_low_threshold": -0.1}, "clip_low_threshold=-0.1"),
    ("dro", {"beta": -1.0}, "beta=-1.0: give a penalty weight of 0 or more"),
])
def test_loss_settings_a_loss_cannot_use_are_named_before_it_runs(loss: str, settings: dict, message: str) -> None:
    """Thresholds out of order or negative, and a negative ``beta``, are a ``TwinkleError`` from ``get_loss``
    (what the Tinker server calls before queueing a request), naming the setting."""
    with pytest.raises(TwinkleError, match=message):
        get_loss(loss, settings)


def test_an_unknown_loss_is_named_with_the_known_ones() -> None:
    """A loss name that does not exist is a ``TwinkleError`` listing every built-in loss."""
    with pytest.raises(TwinkleError, match="loss_fn 'mystery' does not exist; use one of " + ", ".join(LOSSES)):
        get_loss("mystery")


@pytest.mark.parametrize(("tokens", "inputs", "message"), [
    (["a", "b"], {}, r"data\[0\]\.model_input has 'a', which is not a token id"),
    ([1, 2], {"target_tokens": [1.5, 2]}, r"target_tokens'\] has 1\.5, which is not a token id"),
    ([1, -3], {}, r"model_input has token id -3, outside the model's vocabulary \(0–9\)"),
    ([1, 2], {"weights": [1.0, float("nan")]}, r"\['weights'\] has nan at position 1: give finite numbers"),
    ([1, 2], {"advantages": [float("inf"), 0.0]}, r"\['advantages'\] has inf at position 0"),
    ([1, 2], {"logprobs": ["x", "y"]}, r"\['logprobs'\] has 'x', which is not a number"),
])
def test_check_data_refuses_what_would_poison_a_step_by_name(tokens, inputs, message) -> None:
    """Token ids given as strings or fractions, ids outside the vocabulary and NaN or infinite inputs (which would
    make a model's loss NaN for good) are each a named error before anything runs; whole-number float ids, zero
    weights and negative ones (``forward_backward_custom``'s ``-∂C/∂log p``) are accepted."""
    import numpy as np

    from twinkle_core.lowlevel import Datum, check_data

    datum = Datum(tokens, {"target_tokens": np.array([2, 3]), **{k: np.asarray(v) for k, v in inputs.items()}})
    with pytest.raises(TwinkleError, match=message):
        check_data([datum], 10)
    check_data([Datum([1.0, 2.0], {"target_tokens": np.array([2, 3]), "weights": np.array([0.0, 1.0])})], 10)
    check_data([Datum([1, 2], {"target_tokens": np.array([2, 3]), "weights": np.array([-0.5, 2.0])})], 10)
