"""Direct Preference Optimization (Rafailov et al., 2023), the loss TRL's ``DPOTrainer`` computes by default
(``sigmoid``): for a prompt with a chosen and a rejected answer, the policy's log-likelihood ratios against a
frozen reference model, ``r = beta · (log π(answer) − log π_ref(answer))``, and the loss
``−log σ(r_chosen − r_rejected)``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from twinkle_llm.data import IGNORE


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The summed log-probability of each sequence's labelled tokens: ``logits`` ``[N, L, vocab]`` predict
    ``labels`` ``[N, L]`` one position on (``IGNORE`` where a token is not scored) → ``[N]``."""
    targets = labels[:, 1:]
    mask = targets != IGNORE
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(-1)


@dataclass
class PreferenceTerms:
    """DPO's quantities for a batch of pairs (each ``[B]``).

    Attributes:
        loss: ``−log σ(margin)`` per pair.
        chosen_reward: ``beta · (log π − log π_ref)`` of the chosen answer.
        rejected_reward: the same of the rejected answer.
        chosen_logp: the policy's log-likelihood of the chosen answer.
        rejected_logp: the policy's log-likelihood of the rejected answer.
    """

    loss: torch.Tensor
    chosen_reward: torch.Tensor
    rejected_reward: torch.Tensor
    chosen_logp: torch.Tensor
    rejected_logp: torch.Tensor

    @property
    def margin(self) -> torch.Tensor:
        """``chosen_reward − rejected_reward``: how much more the policy moved towards the chosen answer."""
        return self.chosen_reward - self.rejected_reward


def dpo_terms(policy: torch.Tensor, reference: torch.Tensor, beta: float) -> PreferenceTerms:
    """DPO from the summed log-probabilities ``[B, 2]`` (chosen, rejected) of the policy and the reference."""
    rewards = beta * (policy - reference.detach())
    margin = rewards[:, 0] - rewards[:, 1]
    return PreferenceTerms(-F.logsigmoid(margin), rewards[:, 0], rewards[:, 1], policy[:, 0], policy[:, 1])
