"""One module holding a Kronos tokenizer and predictor, with the forecasting loop that joins them."""

from __future__ import annotations

import torch
from torch import nn

from twinkle_timeseries.kronos.layers import Blocks
from twinkle_timeseries.kronos.predictor import KronosPredictor
from twinkle_timeseries.kronos.tokenizer import KronosTokenizer


class KronosNetwork(nn.Module):
    """The tokenizer and the predictor of one Kronos model (saved and loaded together)."""

    def __init__(self, tokenizer: KronosTokenizer, predictor: KronosPredictor) -> None:
        """Hold both parts."""
        super().__init__()
        self.tokenizer, self.predictor = tokenizer, predictor

    def forward(self, x: torch.Tensor, stamps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One training-shaped pass over bars (B, T, F) (stamps (B, T, 5) optional): reconstruction, coarse and
        fine next-token logits."""
        out = self.tokenizer(x)
        inputs = stamps[:, :-1] if stamps is not None else None
        coarse_logits, fine_logits = self.predictor(out.coarse[:, :-1], out.fine[:, :-1], out.coarse[:, 1:], inputs)
        return out.reconstruction, coarse_logits, fine_logits

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute every transformer block's activations during backward."""
        for module in self.modules():
            if isinstance(module, Blocks):
                module.checkpointing = enable

    @torch.no_grad()
    def forecast(self, x: torch.Tensor, pred_len: int, temperature: float = 1.0, top_p: float = 0.9,
                 sample_count: int = 1, max_context: int | None = None,
                 generator: torch.Generator | None = None, stamps: torch.Tensor | None = None,
                 top_k: int = 0) -> torch.Tensor:
        """Sample future bars after z-scored contexts ``x`` (B, T, F); ``stamps`` (B, T + pred_len, 5) are the
        calendar fields of the context's and the future's bars, when known; ``top_k > 0`` samples among that many
        most likely ids instead of the ``top_p`` nucleus.

        Returns (B, sample_count, pred_len, F) in the same z-units: each sample path's tokens are generated
        autoregressively (coarse, then fine) and decoded together with the context, whose decoder is causal.
        """
        batch = x.shape[0]
        coarse, fine = self.tokenizer.encode(x)
        coarse = coarse.repeat_interleave(sample_count, dim=0)
        fine = fine.repeat_interleave(sample_count, dim=0)
        if stamps is not None:
            stamps = stamps.repeat_interleave(sample_count, dim=0)
        new_coarse, new_fine = self.predictor.generate(coarse, fine, pred_len, temperature, top_p, max_context,
                                                       generator, stamps, top_k)
        all_coarse, all_fine = torch.cat([coarse, new_coarse], dim=1), torch.cat([fine, new_fine], dim=1)
        if max_context is not None:
            all_coarse, all_fine = all_coarse[:, -max_context:], all_fine[:, -max_context:]
        bars = self.tokenizer.decode(all_coarse, all_fine)[:, -pred_len:]
        return bars.reshape(batch, sample_count, pred_len, -1)
