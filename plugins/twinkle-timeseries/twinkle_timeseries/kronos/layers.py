"""Transformer parts shared by the Kronos tokenizer and predictor: RMSNorm, rotary positions, SwiGLU.

Every block is pre-norm and causal: position ``t`` sees positions ``≤ t`` only, so a K-line sequence can
be encoded, predicted and decoded one bar at a time without looking ahead.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no centring, a learned scale)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        """``dim`` features, ``eps`` added under the root."""
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scale ``x`` to unit root-mean-square over its last dimension."""
        scale = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * scale).type_as(x) * self.weight


def rotate(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Apply rotary position embedding to ``x`` shaped (batch, heads, time, head_dim).

    Positions run from ``offset`` (the tokens already cached) to ``offset + time - 1``.
    Feature pairs ``(i, i + head_dim/2)`` are rotated by ``position × base^(-2i/head_dim)``.
    """
    steps, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    positions = torch.arange(offset, offset + steps, device=x.device, dtype=torch.float32)
    angles = positions[:, None] * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half : 2 * half]
    rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return torch.cat([rotated, x[..., 2 * half :]], dim=-1) if dim % 2 else rotated


KVCache = list
"""Keys and values already computed by one attention layer (``[]`` before the first call); filled in place."""


class Attention(nn.Module):
    """Multi-head causal attention with rotary positions (self-attention, or queries from another stream).

    With a ``KVCache``, a first call (any length) fills it and later calls take one new position each,
    attending to everything cached — the cost of sampling one more step no longer grows with the context.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        """``d_model`` must be divisible by ``n_heads``."""
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.dropout = n_heads, dropout
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = x.shape
        return x.view(batch, steps, self.n_heads, -1).transpose(1, 2)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """Queries from ``x``, keys and values from ``context`` (``x`` itself by default), both (B, T, D)."""
        context = x if context is None else context
        offset = cache[0].shape[2] if cache else 0
        if offset and x.shape[1] != 1:
            raise ValueError("after the first call, a cached attention takes one position at a time")
        q = rotate(self._heads(self.q(x)), offset)
        k, v = self.kv(context).chunk(2, dim=-1)
        k, v = rotate(self._heads(k), offset), self._heads(v)
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=offset == 0,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(x.shape))


class SwiGLU(nn.Module):
    """The gated feed-forward ``W2(silu(W1 x) ⊙ W3 x)``."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float = 0.0) -> None:
        """``ff_dim`` hidden features."""
        super().__init__()
        self.gate = nn.Linear(d_model, ff_dim, bias=False)
        self.up = nn.Linear(d_model, ff_dim, bias=False)
        self.down = nn.Linear(ff_dim, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward output, same shape as ``x``."""
        return self.drop(self.down(F.silu(self.gate(x)) * self.up(x)))


class Block(nn.Module):
    """A pre-norm causal transformer block: ``x + attn(norm x)``, then ``x + swiglu(norm x)``."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, dropout: float = 0.0) -> None:
        """Sizes of the block."""
        super().__init__()
        self.norm1, self.attn = RMSNorm(d_model), Attention(d_model, n_heads, dropout)
        self.norm2, self.ff = RMSNorm(d_model), SwiGLU(d_model, ff_dim, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """(B, T, D) → (B, T, D)."""
        x = x + self.drop(self.attn(self.norm1(x), cache=cache))
        return x + self.ff(self.norm2(x))


class Stack(nn.Module):
    """``n_layers`` blocks and a final RMSNorm; optional gradient checkpointing."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, n_layers: int, dropout: float = 0.0) -> None:
        """Sizes of the stack."""
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, n_heads, ff_dim, dropout) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        self.checkpointing = False

    def forward(self, x: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """(B, T, D) → (B, T, D); ``caches`` holds one ``KVCache`` per block."""
        for i, block in enumerate(self.blocks):
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x, None if caches is None else caches[i])
        return self.norm(x)
