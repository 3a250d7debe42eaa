"""Transformer parts shared by the Kronos tokenizer and predictor: RMSNorm, rotary positions, SwiGLU, attention.

Module names, shapes and arithmetic follow the paper's reference implementation (``shiyu-coder/Kronos``), so its
released weights load name for name: a block is ``norm1``/``self_attn`` (``q_proj``, ``k_proj``, ``v_proj``,
``out_proj``, with biases)/``norm2``/``ffn`` (``w1``, ``w3``, ``w2``). Every block is pre-norm and causal:
position ``t`` sees positions ``≤ t`` only, so a K-line sequence can be encoded, predicted and decoded one bar at
a time without looking ahead. Self-attention can also run with a ``KVCache`` (one new position per call), which
the reference does not have: sampling one more step then costs the same however long the context is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no centring, a learned scale)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        """``dim`` features, ``eps`` added under the root."""
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scale ``x`` to unit root-mean-square over its last dimension."""
        f = x.float()
        return (f * torch.rsqrt(torch.mean(f * f, dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Apply rotary position embedding to ``x`` shaped (batch, heads, time, head_dim).

    Positions run from ``offset`` (the tokens already cached) to ``offset + time - 1``; feature pairs
    ``(i, i + head_dim/2)`` turn by ``position × base^(-2i/head_dim)``.
    """
    steps, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).float() / dim))
    positions = torch.arange(offset, offset + steps, device=x.device).type_as(inv_freq)
    freqs = torch.einsum("i,j->ij", positions, inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


KVCache = list
"""Keys and values already computed by one attention layer (``[]`` before the first call); filled in place."""


class _Projections(nn.Module):
    """The four biased projections of multi-head attention, and the split into heads."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = x.shape
        return x.view(batch, steps, self.n_heads, self.head_dim).transpose(1, 2)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        batch, _, steps, _ = y.shape
        return self.out_proj(y.transpose(1, 2).contiguous().view(batch, steps, self.d_model))


class SelfAttention(_Projections):
    """Causal multi-head self-attention with rotary positions.

    With a ``KVCache``, a first call (any length) fills it and later calls take one new position each, attending
    to everything cached.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        """``d_model`` must be divisible by ``n_heads``; ``dropout`` on the attention weights and the output."""
        super().__init__(d_model, n_heads)
        self.attn_dropout_p = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """(B, T, D) → (B, T, D)."""
        offset = cache[0].shape[2] if cache else 0
        if offset and x.shape[1] != 1:
            raise ValueError("after the first call, a cached attention takes one position at a time")
        q = rotate(self._heads(self.q_proj(x)), offset)
        k = rotate(self._heads(self.k_proj(x)), offset)
        v = self._heads(self.v_proj(x))
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=offset == 0,
                                           dropout_p=self.attn_dropout_p if self.training else 0.0)
        return self.resid_dropout(self._merge(y))


class CrossAttention(_Projections):
    """Multi-head attention of one stream's queries over another stream's keys and values (biases, no dropout).

    Over whole sequences of equal length (training, validation) both sides carry rotary positions and position
    ``t`` sees keys ``≤ t``. A single query — the step being sampled — attends to every key without positions,
    as the reference implementation does at inference; ``cache`` then keeps the keys and values of the context
    already seen, so each step adds one.
    """

    def forward(self, query: torch.Tensor, context: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """``query`` (B, Tq, D) over ``context`` (B, Tk, D) → (B, Tq, D); with ``cache``, only the context positions
        after those cached are given."""
        single = query.shape[1] == 1
        if not single and (cache is not None or query.shape[1] != context.shape[1]):
            raise ValueError("cross-attention takes one query (sampling) or a query per context position")
        q, k, v = self._heads(self.q_proj(query)), self._heads(self.k_proj(context)), self._heads(self.v_proj(context))
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        if single:
            return self._merge(F.scaled_dot_product_attention(q, k, v))
        return self._merge(F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True))


class FeedForward(nn.Module):
    """The gated feed-forward ``w2(silu(w1 x) ⊙ w3 x)`` (SwiGLU)."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float = 0.0) -> None:
        """``ff_dim`` hidden features."""
        super().__init__()
        self.w1 = nn.Linear(d_model, ff_dim, bias=False)
        self.w3 = nn.Linear(d_model, ff_dim, bias=False)
        self.w2 = nn.Linear(ff_dim, d_model, bias=False)
        self.ffn_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward output, same shape as ``x``."""
        return self.ffn_dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class TransformerBlock(nn.Module):
    """A pre-norm causal transformer block: ``x + self_attn(norm1 x)``, then ``x + ffn(norm2 x)``."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, dropout: float = 0.0) -> None:
        """Sizes of the block."""
        super().__init__()
        self.norm1, self.self_attn = RMSNorm(d_model), SelfAttention(d_model, n_heads, dropout)
        self.norm2, self.ffn = RMSNorm(d_model), FeedForward(d_model, ff_dim, dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """(B, T, D) → (B, T, D)."""
        x = x + self.self_attn(self.norm1(x), cache=cache)
        return x + self.ffn(self.norm2(x))


class Blocks(nn.ModuleList):
    """Transformer blocks run in turn, with optional gradient checkpointing (``checkpointing``)."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, n_layers: int, dropout: float = 0.0) -> None:
        """``n_layers`` blocks of the given sizes."""
        super().__init__(TransformerBlock(d_model, n_heads, ff_dim, dropout) for _ in range(n_layers))
        self.checkpointing = False

    def run(self, x: torch.Tensor, caches: Sequence[KVCache] | None = None) -> torch.Tensor:
        """(B, T, D) → (B, T, D) through every block; ``caches`` holds one ``KVCache`` per block."""
        for i, block in enumerate(self):
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x, None if caches is None else caches[i])
        return x
