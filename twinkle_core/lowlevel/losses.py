"""The loss functions a client names in ``forward_backward`` (Tinker's built-in losses), computed per datum from
the log-probabilities the model gives its target tokens.

- ``cross_entropy``: ``-logprob × weight`` per token (``weights`` default 1), summed: supervised learning.
- ``importance_sampling``: ``-ratio × advantage`` with ``ratio = exp(logprob - sampler_logprob)`` (``logprobs``:
  what the sampler gave the same tokens; ``advantages``): the policy gradient, corrected for a sampler that lags.
- ``ppo``: the clipped objective, ``-min(ratio × A, clip(ratio, clip_low_threshold, clip_high_threshold) × A)``
  (thresholds from the loss's settings, default 0.8 and 1.2).
- ``cispo`` (MiniMax-M1's clipped importance-sampling policy optimisation): ``-sg(clip(ratio, low, high)) × logprob ×
  A`` — the clipped ratio weighs the policy gradient of every token instead of dropping the clipped ones (its
  gradient is ``-clip(ratio) × A × ∇logprob``); thresholds as ``ppo``'s.
- ``dro`` (direct reward optimisation, Richemond et al. 2024): ``-(logprob × A - ½ β (logprob - sampler
  logprob)²)`` — a quadratic penalty on drifting from the sampler, off-policy by design (``beta`` from the settings,
  default 0.05; its advantages are the client's soft ones).

The settings' defaults are Twinkle's where Tinker's documentation names none (the SDK passes ``loss_fn_config``).

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
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
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


def _thresholds(settings: dict[str, Any]) -> tuple[float, float]:
    """The ratio's clipping thresholds (``clip_low_threshold``, ``clip_high_threshold``; 0.8 and 1.2)."""
    low, high = float(settings.get("clip_low_threshold", 0.8)), float(settings.get("clip_high_threshold", 1.2))
    if not 0 <= low <= high:
        raise TwinkleError(f"loss_fn_config clip_low_threshold={low} and clip_high_threshold={high}: give "
                           "0 ≤ low ≤ high (ratios around 1, e.g. 0.8 and 1.2)")
    return low, high


def ppo(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token (negated, to minimise) and its sum."""
    low, high = _thresholds(settings)
    ratio = torch.exp(logprobs - inputs["logprobs"].to(logprobs.dtype))
    advantages = inputs["advantages"].to(logprobs.dtype)
    elementwise = -torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages)
    return elementwise, elementwise.sum()


def cispo(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO per token: ``-sg(clip(ratio)) × logprob × advantage`` (the clipped ratio carries no gradient), and
    its sum."""
    low, high = _thresholds(settings)
    ratio = torch.exp(logprobs - inputs["logprobs"].to(logprobs.dtype))
    elementwise = -ratio.clamp(low, high).detach() * logprobs * inputs["advantages"].to(logprobs.dtype)
    return elementwise, elementwise.sum()


def dro(logprobs: torch.Tensor, inputs: dict[str, torch.Tensor], settings: dict[str, Any]
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """DRO per token: ``-(logprob × advantage - ½ β (logprob - sampler logprob)²)``, and its sum."""
    beta = float(settings.get("beta", 0.05))
    drift = logprobs - inputs["logprobs"].to(logprobs.dtype)
    elementwise = -(logprobs * inputs["advantages"].to(logprobs.dtype) - 0.5 * beta * drift**2)
    return elementwise, elementwise.sum()


LOSSES = {"cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo, "cispo": cispo,
          "dro": dro}
"""The loss functions by the name clients use."""


def get_loss(name: str, settings: dict[str, Any] | None = None) -> Any:
    """The loss called ``name``; with ``settings`` (a request's ``loss_fn_config``), checked to be ones it can use
    — before anything runs.

    Raises:
        TwinkleError: no such loss (the known ones named); thresholds or a ``beta`` it cannot use.
    """
    if name not in LOSSES:
        raise TwinkleError(f"loss_fn '{name}' does not exist; use one of {', '.join(LOSSES)}")
    if settings is not None and name in ("ppo", "cispo"):
        _thresholds(settings)
    if settings is not None and name == "dro" and not float(settings.get("beta", 0.05)) >= 0:
        raise TwinkleError(f"loss_fn_config beta={settings['beta']}: give a penalty weight of 0 or more (e.g. 0.05)")
    return LOSSES[name]
