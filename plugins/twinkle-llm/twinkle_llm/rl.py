"""Reinforcement learning's arithmetic for language models, as the published methods define it.

- ``group_advantages``: each completion's advantage within its prompt's group — GRPO's (DeepSeekMath, Shao et al.
  2024): ``(r - mean) / (std + eps)``; without the division (``scale=False``) Dr. GRPO's (Liu et al. 2025); RLOO's
  (Ahmadian et al. 2024): ``r - mean of the group's others``.
- ``kl_penalty``: the per-token KL estimate to a reference policy that GRPO adds to its loss (Schulman's ``k3``:
  ``exp(ref - logp) - (ref - logp) - 1``, unbiased and never negative).
- ``policy_loss``: the clipped surrogate ``-min(ratio × A, clip(ratio, 1 - clip_low, 1 + clip_high) × A)`` per
  token (``ratio = exp(logp - logp_old)``, ``logp_old`` the policy's when it sampled; ``clip_high`` above
  ``clip_low`` is DAPO's "clip higher"), plus ``beta × k3``, averaged as ``normalisation`` says:

  | ``normalisation`` | the loss | published as |
  | --- | --- | --- |
  | ``"sequence"`` | the mean over completions of each one's mean over its tokens | GRPO (DeepSeekMath) |
  | ``"token"`` | the mean over every completion token of the batch | DAPO (Yu et al. 2025) |
  | ``"constant"`` | the sum over tokens divided by completions × ``max_length`` | Dr. GRPO (Liu et al. 2025) |

  Per sequence, a long completion's tokens weigh less than a short one's; per token, each token weighs the same;
  the constant denominator keeps neither a length bias nor a per-batch scale.

Tensors are ``[completions, tokens]`` with a mask of the completion tokens (prompt and padding are 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from twinkle_core.errors import TwinkleError

Normalisation = Literal["sequence", "token", "constant"]
NORMALISATIONS: tuple[str, ...] = ("sequence", "token", "constant")
ADVANTAGES: tuple[str, ...] = ("grpo", "rloo")


def group_advantages(rewards: torch.Tensor, method: str = "grpo", scale: bool = True, eps: float = 1e-4
                     ) -> torch.Tensor:
    """Advantages of ``rewards`` ``[prompts, group]`` (each row one prompt's completions), the same shape.

    Args:
        rewards: one reward per completion, a row per prompt.
        method: ``"grpo"`` (minus the group's mean, divided by its standard deviation when ``scale``) or ``"rloo"``
            (minus the mean of the group's other completions).
        scale: GRPO's division by the group's standard deviation (``False``: Dr. GRPO).
        eps: added to the standard deviation (a group whose completions all earned the same gets 0).

    Raises:
        TwinkleError: an unknown method, or groups of one completion (nothing to compare with).
    """
    if method not in ADVANTAGES:
        raise TwinkleError(f"advantages='{method}' is not a method; choose one of {', '.join(ADVANTAGES)}")
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise TwinkleError(f"advantages compare completions of one prompt: give groups of 2 or more (rewards of "
                           f"shape {tuple(rewards.shape)})")
    mean = rewards.mean(dim=1, keepdim=True)
    if method == "rloo":
        size = rewards.shape[1]
        return (rewards - mean) * size / (size - 1)  # r - (sum - r) / (size - 1)
    centred = rewards - mean
    return centred / (rewards.std(dim=1, keepdim=True) + eps) if scale else centred


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """``k3`` per token: ``exp(ref - logp) - (ref - logp) - 1`` (≥ 0; 0 where the two agree)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


@dataclass(frozen=True)
class PolicyLoss:
    """``policy_loss``'s result.

    Attributes:
        loss: the scalar to minimise.
        clip_fraction: the share of completion tokens whose ratio was clipped (the clipped term won and carries no
            gradient).
        kl: the mean ``k3`` over completion tokens (0 without a reference).
        ratio: the mean probability ratio over completion tokens.
    """

    loss: torch.Tensor
    clip_fraction: float
    kl: float
    ratio: float


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                *, clip_low: float = 0.2, clip_high: float = 0.2, normalisation: str = "sequence",
                max_length: int | None = None, ref_logprobs: torch.Tensor | None = None, beta: float = 0.0
                ) -> PolicyLoss:
    """The clipped policy loss of a batch of completions (see the module's table for ``normalisation``).

    Args:
        logprobs: ``[B, T]`` the policy's log-probabilities of the sampled tokens now (with gradients).
        old_logprobs: ``[B, T]`` the same when they were sampled (no gradient).
        advantages: ``[B]`` one per completion (or ``[B, T]`` per token).
        mask: ``[B, T]`` 1 on completion tokens.
        clip_low, clip_high: the ratio is clipped to ``[1 - clip_low, 1 + clip_high]``.
        normalisation: ``"sequence"``, ``"token"`` or ``"constant"``.
        max_length: the constant normalisation's length (default ``T``).
        ref_logprobs: ``[B, T]`` the reference policy's, for the KL term.
        beta: the KL term's weight.

    Raises:
        TwinkleError: an unknown normalisation, clipping bounds that are not ≥ 0, a KL weight without a reference.
    """
    if normalisation not in NORMALISATIONS:
        raise TwinkleError(f"loss_normalisation='{normalisation}' is not one; choose one of "
                           f"{', '.join(NORMALISATIONS)}")
    if clip_low < 0 or clip_high < 0 or clip_low >= 1:
        raise TwinkleError(f"clip_low={clip_low}, clip_high={clip_high}: give 0 ≤ clip_low < 1 and clip_high ≥ 0 "
                           "(the ratio is kept in [1 - clip_low, 1 + clip_high])")
    if beta and ref_logprobs is None:
        raise TwinkleError(f"beta={beta} weighs a KL term to a reference policy, and none was given")
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs.detach())
        per_token = per_token + beta * kl
    tokens = mask.sum().clamp(min=1)
    if normalisation == "sequence":
        loss = ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    elif normalisation == "token":
        loss = (per_token * mask).sum() / tokens
    else:
        loss = (per_token * mask).sum() / (logprobs.shape[0] * (max_length or logprobs.shape[1]))
    was_clipped = ((ratio < 1 - clip_low) & (adv < 0)) | ((ratio > 1 + clip_high) & (adv > 0))
    return PolicyLoss(loss, float((was_clipped.to(mask.dtype) * mask).sum() / tokens),
                      float((kl.detach() * mask).sum() / tokens), float((ratio.detach() * mask).sum() / tokens))


__all__ = ["ADVANTAGES", "NORMALISATIONS", "Normalisation", "PolicyLoss", "group_advantages", "kl_penalty",
           "policy_loss"]
