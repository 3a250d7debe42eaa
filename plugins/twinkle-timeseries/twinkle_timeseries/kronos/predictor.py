"""The Kronos predictor: a decoder-only transformer over (coarse, fine) token pairs.

Each step embeds both subtokens of a bar and fuses them into one vector, plus the embedding of the bar's
timestamp (minute, hour, weekday, day, month — the paper's timestamp embeddings) when stamps are given; causal blocks (RMSNorm, rotary
positions, SwiGLU) give a hidden state per step. The *coarse head* predicts the next bar's coarse token from
it. The *fine head* is conditioned on that coarse token: a dependency-aware layer lets the coarse token's
embedding attend (causally) over the hidden states, and the fine token is read from the result. Training uses
the true next coarse token (teacher forcing); sampling draws the coarse token first, then the fine one.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from twinkle_timeseries.kronos.layers import Attention, KVCache, RMSNorm, Stack


def sample_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample ids from ``logits`` (…, vocab) with a temperature and nucleus (top-p) filtering.

    ``temperature <= 0`` takes the most likely id. ``top_p < 1`` keeps the smallest set of ids whose
    probability reaches ``top_p`` (the most likely id is always kept).
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = F.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely ids
        sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


class TemporalEmbedding(nn.Module):
    """The sum of learned embeddings of a bar's minute, hour, weekday, day of the month and month."""

    SIZES = (60, 24, 7, 32, 13)

    def __init__(self, d_model: int) -> None:
        """One table per calendar field (``twinkle_timeseries.data.TIME_FEATURES``)."""
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(n, d_model) for n in self.SIZES)
        for table in self.tables:
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, stamps: torch.Tensor) -> torch.Tensor:
        """Embeddings (…, d_model) of stamps (…, 5)."""
        return sum(table(stamps[..., i]) for i, table in enumerate(self.tables))  # type: ignore[return-value]


class KronosPredictor(nn.Module):
    """(coarse ids, fine ids) of T bars → logits of the next bar's coarse and fine tokens at each step."""

    def __init__(self, s1_bits: int, s2_bits: int, d_model: int, n_heads: int, ff_dim: int, n_layers: int,
                 dropout: float = 0.0, time_embeddings: bool = True) -> None:
        """Vocabulary sizes ``2^s1_bits`` and ``2^s2_bits``; transformer sizes; timestamp embeddings or not."""
        super().__init__()
        self.time_embed = TemporalEmbedding(d_model) if time_embeddings else None
        self.coarse_embed = nn.Embedding(2**s1_bits, d_model)
        self.fine_embed = nn.Embedding(2**s2_bits, d_model)
        self.fuse = nn.Linear(2 * d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.stack = Stack(d_model, n_heads, ff_dim, n_layers, dropout)
        self.coarse_head = nn.Linear(d_model, 2**s1_bits)
        self.dependency_norm = RMSNorm(d_model)
        self.dependency = Attention(d_model, n_heads, dropout)
        self.fine_norm = RMSNorm(d_model)
        self.fine_head = nn.Linear(d_model, 2**s2_bits)

    def hidden(self, coarse: torch.Tensor, fine: torch.Tensor, caches: list[KVCache] | None = None,
               stamps: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states (B, T, D) of the token pairs (B, T) (after those in ``caches``, one per block), with
        their bars' stamps (B, T, 5) when given."""
        x = self.fuse(torch.cat([self.coarse_embed(coarse), self.fine_embed(fine)], dim=-1))
        if stamps is not None and self.time_embed is not None:
            x = x + self.time_embed(stamps)
        return self.stack(self.drop(x), caches)

    def coarse_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the next coarse token at every step."""
        return self.coarse_head(hidden)

    def fine_logits(self, hidden: torch.Tensor, next_coarse: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits of the next fine token at every step, given the next coarse token (B, T)."""
        query = self.coarse_embed(next_coarse)
        conditioned = query + self.dependency(self.dependency_norm(query), hidden, cache)
        return self.fine_head(self.fine_norm(conditioned + hidden))

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
                 stamps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``steps`` further token pairs after (B, T) contexts; returns the generated (B, steps) ids.

        ``stamps`` (B, T + steps, 5), when given, are the calendar fields of the context's bars and of the bars
        to come. Each step draws the coarse token, then the fine token given it. Keys and values are cached
        while the sequence fits ``max_context``; beyond it the last ``max_context`` tokens are re-read each step.
        """
        if max_context is not None and coarse.shape[1] + steps > max_context:
            return self._generate_windowed(coarse, fine, steps, temperature, top_p, max_context, generator, stamps)
        length = coarse.shape[1]
        caches: list[KVCache] = [[] for _ in self.stack.blocks]
        dependency_cache: KVCache = []
        hidden = self.hidden(coarse, fine, caches, _part(stamps, 0, length))
        new_coarse, new_fine = [], []
        for step in range(steps):
            next_coarse = sample_logits(self.coarse_logits(hidden[:, -1:]), temperature, top_p, generator)
            query = torch.cat([coarse[:, 1:], next_coarse], dim=1) if step == 0 else next_coarse
            fine_logits = self.fine_logits(hidden, query, dependency_cache)[:, -1:]
            next_fine = sample_logits(fine_logits, temperature, top_p, generator)
            new_coarse.append(next_coarse)
            new_fine.append(next_fine)
            if step + 1 < steps:
                hidden = self.hidden(next_coarse, next_fine, caches, _part(stamps, length + step, length + step + 1))
        return torch.cat(new_coarse, dim=1), torch.cat(new_fine, dim=1)

    def _generate_windowed(self, coarse: torch.Tensor, fine: torch.Tensor, steps: int, temperature: float,
                           top_p: float, max_context: int, generator: torch.Generator | None,
                           stamps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``generate`` re-reading the last ``max_context`` tokens at every step (no cache)."""
        new_coarse, new_fine = [], []
        for _ in range(steps):
            c, f = coarse[:, -max_context:], fine[:, -max_context:]
            end = coarse.shape[1]
            hidden = self.hidden(c, f, stamps=_part(stamps, end - c.shape[1], end))
            next_coarse = sample_logits(self.coarse_logits(hidden[:, -1:]), temperature, top_p, generator)
            query_coarse = torch.cat([c[:, 1:], next_coarse], dim=1)  # next coarse ids, aligned with hidden
            next_fine = sample_logits(self.fine_logits(hidden, query_coarse)[:, -1:], temperature, top_p, generator)
            coarse, fine = torch.cat([coarse, next_coarse], dim=1), torch.cat([fine, next_fine], dim=1)
            new_coarse.append(next_coarse)
            new_fine.append(next_fine)
        return torch.cat(new_coarse, dim=1), torch.cat(new_fine, dim=1)


def _part(stamps: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    """Steps ``start:end`` of ``stamps`` (``None`` stays ``None``)."""
    return None if stamps is None else stamps[:, start:end]
