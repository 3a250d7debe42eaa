"""The Kronos predictor: a decoder-only transformer over (coarse, fine) token pairs.

Each step embeds both subtokens of a bar (scaled by √d) and fuses them into one vector, plus the embedding of the
bar's timestamp (minute, hour, weekday, day, month — the paper's timestamp embeddings) when stamps are given;
causal blocks (RMSNorm, rotary positions, SwiGLU) and a final RMSNorm give a hidden state per step. The *coarse
head* predicts the next bar's coarse token from it. The *fine head* is conditioned on that coarse token: in the
dependency-aware layer the coarse token's embedding attends over the hidden states, and the fine token is read
from ``norm(hidden + attention)``. Training uses the true next coarse token (teacher forcing); sampling draws the
coarse token first, then the fine one.

Names and arithmetic are the reference implementation's (``embedding``, ``time_emb``, ``transformer``, ``norm``,
``dep_layer``, ``head``), so its released predictors load name for name and forecast as it does. Where they
differ: over whole sequences the dependency layer stays causal in evaluation too (the reference drops its mask
outside training, which lets a validation loss read later bars), and sampling caches keys and values.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from twinkle_timeseries.kronos.layers import Blocks, CrossAttention, KVCache, RMSNorm

DEPENDENCY_HEADS = 4
"""Attention heads of the dependency-aware layer (fixed in the reference implementation, whatever the width)."""


def sample_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample ids from ``logits`` (…, vocab) with a temperature and top-k or nucleus (top-p) filtering.

    ``temperature <= 0`` takes the most likely id. ``top_k > 0`` keeps the ``top_k`` most likely ids (and then
    ignores ``top_p``); ``top_p < 1`` keeps the most likely ids up to and including the one whose cumulative
    probability passes ``top_p`` (the most likely id is always kept). The filtering and the draw are the reference
    implementation's, so a seeded generator draws the ids it draws.
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)
    shape = logits.shape[:-1]
    logits = logits.float().reshape(-1, logits.shape[-1]) / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    elif top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        remove = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1) > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        logits = logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).reshape(shape)


class HierarchicalEmbedding(nn.Module):
    """The embeddings of a bar's coarse and fine subtokens, each scaled by √d, fused by a linear layer."""

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int) -> None:
        """Vocabularies ``2^s1_bits`` and ``2^s2_bits``."""
        super().__init__()
        self.d_model = d_model
        self.emb_s1 = nn.Embedding(2**s1_bits, d_model)
        self.emb_s2 = nn.Embedding(2**s2_bits, d_model)
        self.fusion_proj = nn.Linear(2 * d_model, d_model)

    def forward(self, coarse: torch.Tensor, fine: torch.Tensor) -> torch.Tensor:
        """(B, T) ids of each subtoken → (B, T, D)."""
        scale = math.sqrt(self.d_model)
        return self.fusion_proj(torch.cat([self.emb_s1(coarse) * scale, self.emb_s2(fine) * scale], dim=-1))


class DependencyAwareLayer(nn.Module):
    """``norm(hidden + cross_attn(query=coarse embedding, keys and values=hidden))``."""

    def __init__(self, d_model: int) -> None:
        """``d_model`` divisible by ``DEPENDENCY_HEADS``."""
        super().__init__()
        self.cross_attn = CrossAttention(d_model, DEPENDENCY_HEADS)
        self.norm = RMSNorm(d_model)

    def forward(self, hidden: torch.Tensor, sibling: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Hidden states (B, T, D) conditioned on the next coarse tokens' embeddings ``sibling`` (B, T, D); or, for
        one step being sampled, the last hidden state conditioned on ``sibling`` (B, 1, D) over all of ``hidden``
        (only the positions after those in ``cache``)."""
        last = hidden[:, -1:] if sibling.shape[1] == 1 else hidden
        return self.norm(last + self.cross_attn(sibling, hidden, cache))


class DualHead(nn.Module):
    """The coarse head ``proj_s1`` and the fine head ``proj_s2``."""

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int) -> None:
        """Vocabularies ``2^s1_bits`` and ``2^s2_bits``."""
        super().__init__()
        self.proj_s1 = nn.Linear(d_model, 2**s1_bits)
        self.proj_s2 = nn.Linear(d_model, 2**s2_bits)


class TemporalEmbedding(nn.Module):
    """The sum of learned embeddings of a bar's minute, hour, weekday, day of the month and month."""

    FIELDS = (("minute_embed", 60), ("hour_embed", 24), ("weekday_embed", 7), ("day_embed", 32), ("month_embed", 13))
    """One table per calendar field (``twinkle_timeseries.data.TIME_FEATURES``), with its size."""

    def __init__(self, d_model: int) -> None:
        """One table per field."""
        super().__init__()
        for name, size in self.FIELDS:
            setattr(self, name, nn.Embedding(size, d_model))

    @property
    def tables(self) -> list[nn.Embedding]:
        """The tables, in the order of the stamps' fields."""
        return [getattr(self, name) for name, _ in self.FIELDS]

    def forward(self, stamps: torch.Tensor) -> torch.Tensor:
        """Embeddings (…, d_model) of stamps (…, 5)."""
        stamps = stamps.long()
        minute, hour, weekday, day, month = (table(stamps[..., i]) for i, table in enumerate(self.tables))
        return hour + weekday + day + month + minute


class KronosPredictor(nn.Module):
    """(coarse ids, fine ids) of T bars → logits of the next bar's coarse and fine tokens at each step."""

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int, n_heads: int, ff_dim: int, n_layers: int,
                 dropout: float = 0.0, time_embeddings: bool = True) -> None:
        """Vocabulary sizes ``2^s1_bits`` and ``2^s2_bits``; transformer sizes; timestamp embeddings or not.

        Weights start as the reference's do: Xavier-normal linear layers with zero biases, embeddings drawn with
        standard deviation ``d_model^-0.5``.
        """
        super().__init__()
        if d_model % DEPENDENCY_HEADS:
            raise ValueError(f"d_model ({d_model}) must be divisible by {DEPENDENCY_HEADS}, the dependency layer's heads")
        self.embedding = HierarchicalEmbedding(s1_bits, s2_bits, d_model)
        self.time_emb = TemporalEmbedding(d_model) if time_embeddings else None
        self.token_drop = nn.Dropout(dropout)
        self.transformer = Blocks(d_model, n_heads, ff_dim, n_layers, dropout)
        self.norm = RMSNorm(d_model)
        self.dep_layer = DependencyAwareLayer(d_model)
        self.head = DualHead(s1_bits, s2_bits, d_model)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.xavier_normal_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=self.embedding.d_model**-0.5)

    def hidden(self, coarse: torch.Tensor, fine: torch.Tensor, caches: list[KVCache] | None = None,
               stamps: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states (B, T, D) of the token pairs (B, T) (after those in ``caches``, one per block), with
        their bars' stamps (B, T, 5) when given."""
        x = self.embedding(coarse, fine)
        if stamps is not None and self.time_emb is not None:
            x = x + self.time_emb(stamps)
        return self.norm(self.transformer.run(self.token_drop(x), caches))

    def coarse_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the next coarse token at every step."""
        return self.head.proj_s1(hidden)

    def fine_logits(self, hidden: torch.Tensor, next_coarse: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits of the next fine token given the next coarse token: at every step (``next_coarse`` (B, T)), or
        at the last step (``next_coarse`` (B, 1), attending over all of ``hidden`` and what ``cache`` holds)."""
        return self.head.proj_s2(self.dep_layer(hidden, self.embedding.emb_s1(next_coarse), cache))

    def forward(self, coarse: torch.Tensor, fine: torch.Tensor, next_coarse: torch.Tensor,
                stamps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Coarse and fine logits for every step (teacher forcing with ``next_coarse``)."""
        hidden = self.hidden(coarse, fine, stamps=stamps)
        return self.coarse_logits(hidden), self.fine_logits(hidden, next_coarse)

    def loss(self, coarse: torch.Tensor, fine: torch.Tensor,
             stamps: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Next-token loss over sequences (B, T) (stamps (B, T, 5) optional): the mean of the coarse and fine
        cross-entropies."""
        inputs = stamps[:, :-1] if stamps is not None else None
        coarse_logits, fine_logits = self(coarse[:, :-1], fine[:, :-1], coarse[:, 1:], inputs)
        coarse_ce = F.cross_entropy(coarse_logits.flatten(0, 1).float(), coarse[:, 1:].flatten())
        fine_ce = F.cross_entropy(fine_logits.flatten(0, 1).float(), fine[:, 1:].flatten())
        return (coarse_ce + fine_ce) / 2, {"coarse_ce": coarse_ce.detach(), "fine_ce": fine_ce.detach()}

    @torch.no_grad()
    def generate(self, coarse: torch.Tensor, fine: torch.Tensor, steps: int, temperature: float = 1.0,
                 top_p: float = 1.0, max_context: int | None = None, generator: torch.Generator | None = None,
                 stamps: torch.Tensor | None = None, top_k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``steps`` further token pairs after (B, T) contexts; returns the generated (B, steps) ids.

        ``stamps`` (B, T + steps, 5), when given, are the calendar fields of the context's bars and of the bars
        to come. Each step draws the coarse token, then the fine token given it. Keys and values are cached
        while the sequence fits ``max_context``; beyond it the last ``max_context`` tokens are re-read each step
        (their positions counted from the window's start, as the reference does).
        """
        if max_context is not None and coarse.shape[1] + steps - 1 > max_context:
            return self._generate_windowed(coarse, fine, steps, temperature, top_p, max_context, generator, stamps,
                                           top_k)
        length = coarse.shape[1]
        caches: list[KVCache] = [[] for _ in self.transformer]
        dependency_cache: KVCache = []
        hidden = self.hidden(coarse, fine, caches, _part(stamps, 0, length))
        new_coarse, new_fine = [], []
        for step in range(steps):
            next_coarse = sample_logits(self.coarse_logits(hidden[:, -1:]), temperature, top_p, top_k, generator)
            next_fine = sample_logits(self.fine_logits(hidden, next_coarse, dependency_cache), temperature, top_p,
                                      top_k, generator)
            new_coarse.append(next_coarse)
            new_fine.append(next_fine)
            if step + 1 < steps:
                hidden = self.hidden(next_coarse, next_fine, caches, _part(stamps, length + step, length + step + 1))
        return torch.cat(new_coarse, dim=1), torch.cat(new_fine, dim=1)

    def _generate_windowed(self, coarse: torch.Tensor, fine: torch.Tensor, steps: int, temperature: float,
                           top_p: float, max_context: int, generator: torch.Generator | None,
                           stamps: torch.Tensor | None = None, top_k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``generate`` re-reading the last ``max_context`` tokens at every step (no cache)."""
        new_coarse, new_fine = [], []
        for _ in range(steps):
            c, f = coarse[:, -max_context:], fine[:, -max_context:]
            end = coarse.shape[1]
            hidden = self.hidden(c, f, stamps=_part(stamps, end - c.shape[1], end))
            next_coarse = sample_logits(self.coarse_logits(hidden[:, -1:]), temperature, top_p, top_k, generator)
            next_fine = sample_logits(self.fine_logits(hidden, next_coarse), temperature, top_p, top_k, generator)
            coarse, fine = torch.cat([coarse, next_coarse], dim=1), torch.cat([fine, next_fine], dim=1)
            new_coarse.append(next_coarse)
            new_fine.append(next_fine)
        return torch.cat(new_coarse, dim=1), torch.cat(new_fine, dim=1)


def _part(stamps: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    """Steps ``start:end`` of ``stamps`` (``None`` stays ``None``)."""
    return None if stamps is None else stamps[:, start:end]
