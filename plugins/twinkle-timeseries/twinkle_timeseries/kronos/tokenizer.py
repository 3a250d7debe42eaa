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

from twinkle_timeseries.kronos.layers import Stack


def _binary_entropy(p: torch.Tensor) -> torch.Tensor:
    p = p.clamp(1e-6, 1 - 1e-6)
    return -(p * p.log() + (1 - p) * (1 - p).log())


class BinarySphericalQuantizer(nn.Module):
    """Project onto the unit sphere and round each coordinate to ``±1/√L`` (straight-through gradient)."""

    def __init__(self, bits: int, beta: float = 0.25, gamma: float = 1.0, inv_temperature: float = 1.0,
                 entropy_weight: float = 0.1) -> None:
        """``bits`` dimensions; ``beta`` commitment weight; ``gamma`` codebook-entropy weight."""
        super().__init__()
        self.bits, self.beta, self.gamma = bits, beta, gamma
        self.inv_temperature, self.entropy_weight = inv_temperature, entropy_weight

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(…, L) → (quantised values, ±1 bits as 0/1 ints, auxiliary loss)."""
        u = F.normalize(z.float(), dim=-1)
        scale = self.bits**-0.5
        hard = torch.where(u >= 0, scale, -scale)
        quantised = u + (hard - u).detach()
        commitment = (u - hard).pow(2).sum(dim=-1).mean()
        p_one = torch.sigmoid(4 * self.inv_temperature * scale * u)  # q(bit=1|u) from the distance to ±scale
        per_sample = _binary_entropy(p_one).sum(dim=-1).mean()
        codebook = _binary_entropy(p_one.reshape(-1, self.bits).mean(dim=0)).sum()
        loss = self.beta * commitment + self.entropy_weight * (per_sample - self.gamma * codebook)
        return quantised.type_as(z), (u >= 0).long(), loss

    def values(self, bits: torch.Tensor) -> torch.Tensor:
        """0/1 bits → quantised values ``±1/√L``."""
        return (bits.float() * 2 - 1) * self.bits**-0.5


@dataclass
class TokenizerOutput:
    """What one tokenizer pass gives: reconstructions from the coarse bits and all bits, tokens, BSQ loss."""

    coarse_reconstruction: torch.Tensor
    reconstruction: torch.Tensor
    coarse: torch.Tensor
    fine: torch.Tensor
    bsq_loss: torch.Tensor


class KronosTokenizer(nn.Module):
    """Bars (B, T, features) ⇄ coarse and fine token ids (B, T), each in ``[0, 2^bits)``."""

    def __init__(self, features: int, d_model: int, n_heads: int, ff_dim: int, enc_layers: int, dec_layers: int,
                 s1_bits: int, s2_bits: int, dropout: float = 0.0) -> None:
        """Sizes of the autoencoder and of the two subtokens."""
        super().__init__()
        self.features, self.s1_bits, self.s2_bits = features, s1_bits, s2_bits
        self.embed = nn.Linear(features, d_model)
        self.encoder = Stack(d_model, n_heads, ff_dim, enc_layers, dropout)
        self.to_code = nn.Linear(d_model, s1_bits + s2_bits)
        self.quantizer = BinarySphericalQuantizer(s1_bits + s2_bits)
        self.from_coarse = nn.Linear(s1_bits, d_model)
        self.from_code = nn.Linear(s1_bits + s2_bits, d_model)
        self.decoder = Stack(d_model, n_heads, ff_dim, dec_layers, dropout)
        self.head = nn.Linear(d_model, features)
        weights = torch.pow(2, torch.arange(max(s1_bits, s2_bits) - 1, -1, -1))
        self.register_buffer("_weights", weights, persistent=False)

    def _indices(self, bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        coarse, fine = bits[..., : self.s1_bits], bits[..., self.s1_bits :]
        return (coarse * self._weights[-self.s1_bits :]).sum(-1), (fine * self._weights[-self.s2_bits :]).sum(-1)

    def _bits(self, index: torch.Tensor, width: int) -> torch.Tensor:
        return (index.unsqueeze(-1) // self._weights[-width:]) % 2

    def forward(self, x: torch.Tensor) -> TokenizerOutput:
        """Encode, quantise and decode ``x`` (both with the coarse bits only and with all bits)."""
        quantised, bits, loss = self.quantizer(self.to_code(self.encoder(self.embed(x))))
        coarse_only = self.head(self.decoder(self.from_coarse(quantised[..., : self.s1_bits])))
        full = self.head(self.decoder(self.from_code(quantised)))
        coarse, fine = self._indices(bits)
        return TokenizerOutput(coarse_only, full, coarse, fine, loss)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bars (B, T, F) → (coarse ids, fine ids), each (B, T)."""
        _, bits, _ = self.quantizer(self.to_code(self.encoder(self.embed(x))))
        return self._indices(bits)

    def decode(self, coarse: torch.Tensor, fine: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids (B, T) → bars (B, T, F); with ``fine=None`` from the coarse subtoken alone."""
        coarse_values = self.quantizer.values(self._bits(coarse, self.s1_bits))
        if fine is None:
            return self.head(self.decoder(self.from_coarse(coarse_values)))
        values = torch.cat([coarse_values, self.quantizer.values(self._bits(fine, self.s2_bits))], dim=-1)
        return self.head(self.decoder(self.from_code(values)))

    def loss(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Training loss: mean of the coarse and full reconstruction MSEs, plus the BSQ loss; and its parts."""
        out = self(x)
        coarse_mse = F.mse_loss(out.coarse_reconstruction, x)
        mse = F.mse_loss(out.reconstruction, x)
        total = (coarse_mse + mse) / 2 + out.bsq_loss
        return total, {"recon_mse": mse.detach(), "coarse_recon_mse": coarse_mse.detach(),
                       "bsq_loss": out.bsq_loss.detach()}
