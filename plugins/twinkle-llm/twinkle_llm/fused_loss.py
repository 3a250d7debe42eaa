"""The next-token cross-entropy through the LM head, fused and chunked: the ``[tokens, vocabulary]`` logits are never
materialised whole (as Liger's ``FusedLinearCrossEntropy`` and torchtune's chunked loss avoid them, in plain PyTorch).

A language model's loss usually computes every position's logits (``tokens × vocabulary``, 151,936 wide for Qwen3's
tokenizer), upcasts them to fp32 and keeps them for the backward pass: for a batch of 8 × 512 tokens that is
2.5 GB. ``fused_linear_cross_entropy`` takes the final hidden states instead and, chunk by chunk of tokens, computes
the chunk's logits, its summed loss and — in the same pass — the gradients of the hidden states and of the head's
weight (``softmax − one-hot`` times the head), keeping only those. Only the labelled positions are computed (an
ignored position adds no loss and no gradient): in instruction tuning, where the prompt's tokens and the padding
are not predicted, that is most of the head's work saved. The backward pass then scales them by the
incoming gradient. Memory: one chunk's logits (``CHUNK_BYTES``) instead of all of them; arithmetic: the same
matrix products, done in the forward pass.

Numerically it is the same loss: the logits of a chunk are computed in the hidden states' type (bf16 under bf16
autocast, as the head would compute them) and the softmax in fp32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

CHUNK_BYTES = 2**27
"""The most bytes one chunk's fp32 logits take (128 MiB: about 220 tokens of a 151,936-word vocabulary)."""

IGNORE_INDEX = -100


def chunk_tokens(vocabulary: int) -> int:
    """Tokens per chunk for a vocabulary of ``vocabulary`` words: ``CHUNK_BYTES`` of fp32 logits, 64 at least."""
    return max(64, CHUNK_BYTES // (4 * max(vocabulary, 1)))


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T (+ bias)`` against ``targets`` with gradients computed forward."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, chunk: int, grads: bool = True) -> torch.Tensor:  # type: ignore[override]
        dtype = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) \
            else hidden.dtype
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            grad_hidden = torch.zeros_like(hidden) if grads and hidden.requires_grad else None
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads and weight.requires_grad else None
            grad_bias = torch.zeros_like(bias, dtype=torch.float32) \
                if grads and bias is not None and bias.requires_grad else None
            # only the labelled positions' logits are computed: an ignored one adds no loss and no gradient (in
            # instruction tuning most of a window is prompt or padding)
            kept = (targets != IGNORE_INDEX).nonzero().squeeze(1)
            for start in range(0, len(kept), chunk):
                rows = kept[start:start + chunk]
                t, x = targets[rows], h[rows]
                logits = (x @ w.T).float()
                if b is not None:
                    logits = logits + b.float()
                log_z = torch.logsumexp(logits, dim=-1)
                total += (log_z - logits.gather(1, t[:, None]).squeeze(1)).sum()
                if grad_hidden is None and grad_weight is None and grad_bias is None:
                    continue
                grad = torch.softmax(logits, dim=-1)  # d loss / d logits = softmax - one-hot
                grad[torch.arange(len(t), device=t.device), t] -= 1
                grad_logits = grad.to(dtype)
                if grad_hidden is not None:
                    grad_hidden[rows] = (grad_logits @ w).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += (grad_logits.T @ x).float()
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        return total

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        scale = grad_output.float()
        return (grad_hidden * scale.to(grad_hidden.dtype) if grad_hidden is not None else None,
                (grad_weight * scale).to(weight_dtype) if grad_weight is not None else None,
                (grad_bias * scale).to(bias_dtype) if grad_bias is not None else None,
                None, None, None)


def fused_linear_cross_entropy(hidden: torch.Tensor, head: nn.Linear, targets: torch.Tensor,
                               chunk: int | None = None) -> torch.Tensor:
    """The summed next-token cross-entropy of ``head(hidden)`` against ``targets`` (``IGNORE_INDEX`` skipped),
    without materialising the logits whole (see the module docstring).

    Args:
        hidden: ``[tokens, hidden]`` final hidden states (flattened over the batch).
        head: the LM head (a plain ``nn.Linear``; tied to the embeddings or not).
        targets: ``[tokens]`` target ids.
        chunk: tokens per chunk (default: ``chunk_tokens`` of the vocabulary).
    """
    return _FusedLinearCrossEntropy.apply(hidden, head.weight, head.bias, targets,
                                          chunk or chunk_tokens(head.out_features),
                                          torch.is_grad_enabled())  # no gradients computed for validation


__all__ = ["CHUNK_BYTES", "chunk_tokens", "fused_linear_cross_entropy"]
