"""The Kronos tokenizer: a causal transformer autoencoder with binary spherical quantisation (BSQ).

Each bar (a vector of z-scored features) is encoded, in context of the bars before it, into a point on the
unit sphere of ``s1_bits + s2_bits`` dimensions and quantised to the nearest corner ``sign(u)/√L`` — one bit
per dimension. The first ``s1_bits`` bits form the *coarse* subtoken, the rest the *fine* subtoken. The
decoder is trained to rebuild the bars from the coarse bits alone and from all bits, so the coarse token
carries most of the signal and the fine token refines it (a hierarchy the predictor mirrors).

The quantiser's auxiliary loss is BSQ's: a commitment term, low per-bar bit entropy (confident codes) and
high codebook entropy (all codes used), with factorised per-bit probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from twinkle_timeseries.kronos.layers import Blocks


def _binary_entropy(p: torch.Tensor) -> torch.Tensor:
    p = p.clamp(1e-6, 1 - 1e-6)
    return -(p * p.log() + (1 - p) * (1 - p).log())


class BinarySphericalQuantizer(nn.Module):
    """Project onto the unit sphere and round each coordinate to ``±1/√L`` (straight-through gradient).

    A coordinate above zero is bit 1. Subtoken ids read their bits least significant first (bit ``i`` of a
    subtoken weighs ``2^i``), as the released Kronos models number their tokens.
    """

    def __init__(self, bits: int, beta: float = 0.25, gamma: float = 1.0, inv_temperature: float = 1.0,
                 entropy_weight: float = 0.1) -> None:
        """``bits`` dimensions; ``beta`` commitment weight; ``gamma`` codebook-entropy weight."""
        super().__init__()
        self.bits, self.beta, self.gamma = bits, beta, gamma
        self.inv_temperature, self.entropy_weight = inv_temperature, entropy_weight
        self.scale = 1.0 / bits**0.5

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(…, L) → (quantised values, bits as 0/1 ints, auxiliary loss)."""
        u = F.normalize(z, dim=-1)
        sign = torch.where(u > 0, torch.ones_like(u), -torch.ones_like(u))
        quantised = (u + (sign - u).detach()) * self.scale
        commitment = (quantised.detach() - u).pow(2).sum(dim=-1).mean()
        p_one = torch.sigmoid(4 * self.inv_temperature * self.scale * u.float())  # q(bit=1|u) from the distance to ±scale
        per_sample = _binary_entropy(p_one).sum(dim=-1).mean()
        codebook = _binary_entropy(p_one.reshape(-1, self.bits).mean(dim=0)).sum()
        loss = self.beta * commitment + self.entropy_weight * (per_sample - self.gamma * codebook)
        return quantised, (u > 0).long(), loss

    def values(self, bits: torch.Tensor) -> torch.Tensor:
        """0/1 bits → quantised values ``±1/√L``."""
        return (bits.float() * 2 - 1) * self.scale


@dataclass
class TokenizerOutput:
    """What one tokenizer pass gives: reconstructions from the coarse bits and all bits, tokens, BSQ loss."""

    coarse_reconstruction: torch.Tensor
    reconstruction: torch.Tensor
    coarse: torch.Tensor
    fine: torch.Tensor
    bsq_loss: torch.Tensor


class KronosTokenizer(nn.Module):
    """Bars (B, T, features) ⇄ coarse and fine token ids (B, T), each in ``[0, 2^bits)``.

    Its parts carry the reference implementation's names (``embed``, ``encoder``, ``quant_embed``,
    ``post_quant_embed_pre``, ``post_quant_embed``, ``decoder``, ``head``); ``enc_layers`` and ``dec_layers`` count
    blocks (a released config's ``n_enc_layers`` is one more than its blocks).
    """

    def __init__(self, features: int, d_model: int, n_heads: int, ff_dim: int, enc_layers: int, dec_layers: int,
                 s1_bits: int, s2_bits: int, dropout: float = 0.0) -> None:
        """Sizes of the autoencoder and of the two subtokens."""
        super().__init__()
        self.features, self.s1_bits, self.s2_bits = features, s1_bits, s2_bits
        self.embed = nn.Linear(features, d_model)
        self.head = nn.Linear(d_model, features)
        self.encoder = Blocks(d_model, n_heads, ff_dim, enc_layers, dropout)
        self.decoder = Blocks(d_model, n_heads, ff_dim, dec_layers, dropout)
        self.quant_embed = nn.Linear(d_model, s1_bits + s2_bits)
        self.post_quant_embed_pre = nn.Linear(s1_bits, d_model)
        self.post_quant_embed = nn.Linear(s1_bits + s2_bits, d_model)
        self.quantizer = BinarySphericalQuantizer(s1_bits + s2_bits)

    def _indices(self, bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        coarse, fine = bits[..., : self.s1_bits], bits[..., self.s1_bits :]
        return (coarse * _weights(self.s1_bits, bits.device)).sum(-1), (fine * _weights(self.s2_bits, bits.device)).sum(-1)

    @staticmethod
    def _bits(index: torch.Tensor, width: int) -> torch.Tensor:
        return (index.unsqueeze(-1) & _weights(width, index.device)).ne(0).long()

    def _decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.head(self.decoder.run(z))

    def _quantise(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.quantizer(self.quant_embed(self.encoder.run(self.embed(x))))

    def forward(self, x: torch.Tensor) -> TokenizerOutput:
        """Encode, quantise and decode ``x`` (both with the coarse bits only and with all bits)."""
        quantised, bits, loss = self._quantise(x)
        coarse_only = self._decode(self.post_quant_embed_pre(quantised[..., : self.s1_bits]))
        full = self._decode(self.post_quant_embed(quantised))
        coarse, fine = self._indices(bits)
        return TokenizerOutput(coarse_only, full, coarse, fine, loss)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bars (B, T, F) → (coarse ids, fine ids), each (B, T)."""
        return self._indices(self._quantise(x)[1])

    def decode(self, coarse: torch.Tensor, fine: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids (B, T) → bars (B, T, F); with ``fine=None`` from the coarse subtoken alone."""
        coarse_values = self.quantizer.values(self._bits(coarse, self.s1_bits))
        if fine is None:
            return self._decode(self.post_quant_embed_pre(coarse_values))
        values = torch.cat([coarse_values, self.quantizer.values(self._bits(fine, self.s2_bits))], dim=-1)
        return self._decode(self.post_quant_embed(values))

    def loss(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Training loss: mean of the coarse and full reconstruction MSEs, plus the BSQ loss; and its parts."""
        out = self(x)
        coarse_mse = F.mse_loss(out.coarse_reconstruction, x)
        mse = F.mse_loss(out.reconstruction, x)
        total = (coarse_mse + mse) / 2 + out.bsq_loss
        return total, {"recon_mse": mse.detach(), "coarse_recon_mse": coarse_mse.detach(),
                       "bsq_loss": out.bsq_loss.detach()}


def _weights(width: int, device: torch.device) -> torch.Tensor:
    """``2^0 … 2^(width-1)``: the weight of each bit of a subtoken id, least significant first."""
    return 2 ** torch.arange(width, device=device, dtype=torch.long)
