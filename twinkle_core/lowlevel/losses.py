"""The loss functions a client names in ``forward_backward`` (Tinker's built-in losses), computed per datum from
the log-probabilities the model gives its target tokens.

- ``cross_entropy``: ``-logprob × weight`` per token (``weights`` default 1), summed: supervised learning.
- ``importance_sampling``: ``-ratio × advantage`` with ``ratio = exp(logprob - sampler_logprob)`` (``logprobs``:
  what the sampler gave the same tokens; ``advantages``): the policy gradient, corrected for a sampler that lags.
- ``ppo``: the clipped objective, ``-min(ratio × A, clip(ratio, clip_low_threshold, clip_high_threshold) × A)``
  (thresholds from the loss's settings, default 0.8 and 1.2).

Each returns the elementwise loss ``[N]`` and the datum's loss (their sum); the batch's loss is the sum over
its data, reported as ``loss:sum``.
"""

from __future__ import annotations

from typing import Any

import torch

from twinkle_core.errors import TwinkleError

REQUIRED: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens",),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}
"""Each loss's required per-token inputs (besides optional ``weights`` for ``cross_entropy``)."""


def cross_entropy(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``-logprob × weight`` per token and its sum."""
    weights = inputs.get("weights")
    elementwise = -logprobs * (weights.to(logprobs.dtype) if weights is not None else 1.0)
    return elementwise, elementwise.sum()


def importance_sampling(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``-exp(logprob - sampler logprob) × advantage`` per token and its sum."""
    ratio = torch.exp(logprobs - inputs["logprobs"].to(logprobs.dtype))
    elementwise = -ratio * inputs["advantages"].to(logprobs.dtype)
    return elementwise, elementwise.sum()


def ppo(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token (negated, to minimise) and its sum."""
    low = float(settings.get("clip_low_threshold", 0.8))
    high = float(settings.get("clip_high_threshold", 1.2))
    ratio = torch.exp(logprobs - inputs["logprobs"].to(logprobs.dtype))
    advantages = inputs["advantages"].to(logprobs.dtype)
    elementwise = -torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages)
    return elementwise, elementwise.sum()


LOSSES = {"cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo}
"""The loss functions by the name clients use."""


def get_loss(name: str) -> Any:
    """The loss called ``name``.

    Raises:
        TwinkleError: no such loss (the known ones named).
    """
    if name not in LOSSES:
        raise TwinkleError(f"loss_fn '{name}' does not exist; use one of {', '.join(LOSSES)}")
    return LOSSES[name]
