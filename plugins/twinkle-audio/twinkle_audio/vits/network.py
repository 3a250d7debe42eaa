"""The VITS-style network of ``MelOTTS``, on coqui-tts's layers.

- a text encoder over phones with MeloTTS's tone and language embeddings (coqui's relative-position
  transformer, conditioned on the speaker before its third block as in VITS2), giving the prior
  ``N(m_p, exp(logs_p))`` per phone;
- a posterior encoder over the clip's log-magnitude spectrogram and a normalising flow (coqui's residual
  coupling blocks, each with a transformer block before its WaveNet: VITS2's transformer flow) from the
  posterior to the prior's space;
- monotonic alignment search (``monotonic_alignment_search``) between phones and frames — with VITS2's noise
  and a beta-binomial diagonal prior early on — and a duration predictor trained on the found durations;
- a speaker embedding conditioning the posterior, the flow, the duration predictor and the decoder;
- a decoder from the latent frames: to the log-magnitude spectrogram (``vocoder="griffin-lim"``, inverted with
  Griffin-Lim: the fast path for CPUs and CI), or straight to the waveform with coqui's HiFi-GAN generator
  (``vocoder="hifigan"``, VITS proper: trained on random latent segments against coqui's multi-period
  discriminator, see ``MelOTTS``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _text_encoder_class() -> type:
    from TTS.tts.layers.vits.networks import TextEncoder
    from TTS.tts.utils.helpers import sequence_mask

    class ToneTextEncoder(TextEncoder):
        """coqui's VITS text encoder with tone and language embeddings summed into each phone's (MeloTTS)."""

        def __init__(self, n_vocab: int, n_tones: int, n_languages: int, out_channels: int, hidden: int,
                     ffn: int, heads: int, layers: int, kernel: int, dropout: float, speaker_channels: int = 0,
                     bert_channels: int = 0) -> None:
            super().__init__(n_vocab, out_channels, hidden, ffn, heads, layers, kernel, dropout)
            self.bert_proj = nn.Linear(bert_channels, hidden) if bert_channels else None  # MeloTTS's BERT input
            # VITS2: the speaker enters before the third transformer block (the last, in shallower encoders)
            self.speaker_layer = min(2, layers - 1)
            self.speaker_proj = nn.Linear(speaker_channels, hidden) if speaker_channels else None
            self.tone_emb = nn.Embedding(n_tones, hidden)
            self.language_emb = nn.Embedding(n_languages, hidden)
            nn.init.normal_(self.tone_emb.weight, 0.0, hidden ** -0.5)
            nn.init.normal_(self.language_emb.weight, 0.0, hidden ** -0.5)

        def forward(self, x: torch.Tensor, tones: torch.Tensor, languages: torch.Tensor,  # type: ignore[override]
                    lengths: torch.Tensor, g: torch.Tensor | None = None,
                    bert: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
            h = self.emb(x) + self.tone_emb(tones) + self.language_emb(languages)
            if self.bert_proj is not None and bert is not None:
                h = h + self.bert_proj(bert)
            h = h * math.sqrt(self.hidden_channels)
            h = h.transpose(1, -1)
            mask = sequence_mask(lengths, h.size(2)).unsqueeze(1).to(h.dtype)
            h = self._encode(h * mask, mask, g)
            stats = self.proj(h) * mask
            m, logs = torch.split(stats, self.out_channels, dim=1)
            return h, m, logs, mask

        def _encode(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
            """coqui's relative-position transformer, layer by layer, with the speaker vector ``g`` ``[B, C, 1]``
            added before block ``speaker_layer`` (VITS2's speaker-conditioned text encoder)."""
            encoder = self.encoder
            attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
            for i in range(encoder.num_layers):
                if i == self.speaker_layer and self.speaker_proj is not None and g is not None:
                    x = x + self.speaker_proj(g.transpose(1, 2)).transpose(1, 2)
                x = x * x_mask
                y = encoder.dropout(encoder.attn_layers[i](x, x, attn_mask))
                x = encoder.norm_layers_1[i](x + y)
                y = encoder.dropout(encoder.ffn_layers[i](x, x_mask))
                x = encoder.norm_layers_2[i](x + y)
            return x * x_mask

    return ToneTextEncoder


class _AttentiveWN(nn.Module):
    """VITS2's transformer coupling: a relative-position transformer block (residual) before a coupling
    layer's WaveNet, so the flow sees the whole utterance, not just a convolution's reach."""

    def __init__(self, attention: nn.Module, wavenet: nn.Module) -> None:
        super().__init__()
        self.attention, self.wavenet = attention, wavenet

    def forward(self, h: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        return self.wavenet(h + self.attention(h * x_mask, x_mask), x_mask, g=g)


def coupling_flow(channels: int, hidden: int, flows: int, speaker_channels: int, transformer: bool,
                  heads: int = 2, ffn: int = 256, dropout: float = 0.1) -> nn.Module:
    """coqui's residual coupling blocks (VITS: mean-only affine couplings on WaveNets of 4 layers, kernel 5) —
    with ``transformer``, VITS2's transformer flow (a transformer block before each coupling's WaveNet)."""
    from TTS.tts.layers.glow_tts.transformer import RelativePositionTransformer
    from TTS.tts.layers.vits.networks import ResidualCouplingBlocks

    blocks = ResidualCouplingBlocks(channels, hidden, 5, 1, 4, num_flows=flows, cond_channels=speaker_channels)
    if transformer:
        for flow in blocks.flows:
            flow.enc = _AttentiveWN(RelativePositionTransformer(hidden, hidden, hidden, ffn, heads, 1, 3, dropout,
                                                                rel_attn_window_size=4), flow.enc)
    return blocks


class SpectrogramDecoder(nn.Module):
    """Latent frames → log-magnitude spectrogram: residual dilated convolutions, conditioned on the speaker."""

    def __init__(self, in_channels: int, hidden: int, bins: int, layers: int, speaker_channels: int) -> None:
        """Build the stack."""
        super().__init__()
        self.pre = nn.Conv1d(in_channels, hidden, 7, padding=3)
        self.cond = nn.Conv1d(speaker_channels, hidden, 1)
        self.blocks = nn.ModuleList(nn.Conv1d(hidden, hidden, 5, padding=2 * 2 ** (i % 3), dilation=2 ** (i % 3))
                                    for i in range(layers))
        self.norms = nn.ModuleList(nn.GroupNorm(1, hidden) for _ in range(layers))
        self.post = nn.Conv1d(hidden, bins, 1)

    def forward(self, z: torch.Tensor, mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``[B, C, F]`` latents (masked) → ``[B, bins, F]`` log magnitudes."""
        h = self.pre(z) + self.cond(g)
        for conv, norm in zip(self.blocks, self.norms):
            h = h + conv(nn.functional.gelu(norm(h))) * mask
        return self.post(h) * mask + math.log(1e-5) * (1 - mask)


def log_alignment_prior(phone_lengths: torch.Tensor, frame_lengths: torch.Tensor,
                        shape: torch.Size, scaling: float = 1.0) -> torch.Tensor:
    """The beta-binomial alignment prior (Badlani et al., 2021, "One TTS alignment to rule them all"): frame ``i``
    of ``F`` attends to phone ``k`` of ``L`` with probability ``BetaBinomial(k; L, s·i, s·(F + 1 − i))``, a soft
    diagonal. Returns its log ``[B, F, L]`` (0 outside each item's lengths) — added to the alignment search's
    scores so early, untrained alignments follow the diagonal instead of collapsing onto a few phones."""
    batch, frames, phones = shape
    k = torch.arange(phones, dtype=torch.float32, device=phone_lengths.device).view(1, 1, phones)
    i = torch.arange(1, frames + 1, dtype=torch.float32, device=phone_lengths.device).view(1, frames, 1)
    n = phone_lengths.float().view(batch, 1, 1)
    m = frame_lengths.float().view(batch, 1, 1)
    a, b = scaling * i, (scaling * (m + 1 - i)).clamp_min(1e-3)
    lbeta = lambda x, y: torch.lgamma(x) + torch.lgamma(y) - torch.lgamma(x + y)  # noqa: E731
    log_pmf = (torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma((n - k + 1).clamp_min(1e-3))
               + lbeta(k + a, (n - k).clamp_min(0) + b) - lbeta(a, b))
    inside = (k < n) & (i <= m)
    return torch.where(inside, log_pmf, torch.zeros_like(log_pmf))


def hifigan_generator(in_channels: int, hop: int, channels: int, speaker_channels: int) -> nn.Module:
    """coqui's HiFi-GAN generator as VITS configures it (residual blocks of kernels 3/7/11, dilations 1/3/5),
    upsampling ×8, ×8, then ×2 until one latent frame becomes ``hop`` samples; ``channels`` after its first
    convolution, conditioned on the speaker."""
    from TTS.vocoder.models.hifigan_generator import HifiganGenerator

    factors, rest = [], hop
    for factor in (8, 8) + (2,) * 8:
        if rest % factor == 0 and rest > 1:
            factors.append(factor)
            rest //= factor
    if rest != 1 or channels // 2 ** len(factors) < 1:
        raise ValueError(f"hop {hop} is not 64 times a power of two, which the HiFi-GAN generator upsamples by")
    return HifiganGenerator(in_channels, 1, "1", [[1, 3, 5]] * 3, [3, 7, 11], [2 * f for f in factors], channels,
                            factors, inference_padding=0, cond_channels=speaker_channels, conv_pre_weight_norm=False,
                            conv_post_weight_norm=False, conv_post_bias=False)


class DurationDiscriminator(nn.Module):
    """VITS2's duration discriminator: from the (detached) text states and speaker, the probability that a
    sequence of log durations is the alignment's rather than the duration predictor's — trained adversarially
    (least squares) so predicted durations get the alignment's rhythm, not just its average."""

    def __init__(self, in_channels: int, channels: int = 192, kernel: int = 3, dropout: float = 0.1,
                 speaker_channels: int = 0) -> None:
        """Two convolutions over the text states, then two over them joined with the durations, then a
        per-phone probability."""
        super().__init__()
        pad = kernel // 2
        self.cond = nn.Conv1d(speaker_channels, in_channels, 1) if speaker_channels else None
        self.text = nn.ModuleList([nn.Conv1d(in_channels, channels, kernel, padding=pad),
                                   nn.Conv1d(channels, channels, kernel, padding=pad)])
        self.duration = nn.Conv1d(1, channels, 1)
        self.joint = nn.ModuleList([nn.Conv1d(2 * channels, channels, kernel, padding=pad),
                                    nn.Conv1d(channels, channels, kernel, padding=pad)])
        self.norms = nn.ModuleList(nn.GroupNorm(1, channels) for _ in range(4))
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(channels, 1)

    def _stack(self, convs: nn.ModuleList, norms: list[nn.Module], x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for conv, norm in zip(convs, norms):
            x = self.dropout(norm(torch.relu(conv(x * mask))))
        return x * mask

    def forward(self, states: torch.Tensor, mask: torch.Tensor, log_durations: torch.Tensor,
                g: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, C, L]`` text states, ``[B, 1, L]`` mask and log durations → ``[B, 1, L]`` probabilities."""
        x = states.detach() + (self.cond(g.detach()) if self.cond is not None and g is not None else 0)
        x = self._stack(self.text, list(self.norms[:2]), x, mask)
        x = torch.cat([x, self.duration(log_durations * mask)], dim=1)
        x = self._stack(self.joint, list(self.norms[2:]), x, mask)
        return torch.sigmoid(self.out(x.transpose(1, 2))).transpose(1, 2) * mask


class VitsMel(nn.Module):
    """The whole network; ``forward`` returns the training losses, ``infer`` a spectrogram."""

    def __init__(self, n_vocab: int, n_tones: int, n_languages: int, n_speakers: int, bins: int, hidden: int = 96,
                 inter: int = 96, ffn: int = 256, heads: int = 2, encoder_layers: int = 3, posterior_layers: int = 8,
                 flows: int = 4, decoder_layers: int = 6, speaker_channels: int = 64, dropout: float = 0.1,
                 vocoder: str = "griffin-lim", hop: int = 256, generator_channels: int = 128,
                 transformer_flow: bool = True, speaker_text_encoder: bool = True, bert_channels: int = 0) -> None:
        """Build every part (sizes: see ``twinkle_audio.melotts.SIZES``); ``hop`` and
        ``generator_channels`` size the HiFi-GAN generator when ``vocoder="hifigan"``;
        ``transformer_flow`` and ``speaker_text_encoder`` are VITS2's (off: VITS's); ``bert_channels`` adds
        MeloTTS's per-phone BERT features to the text encoder's input."""
        super().__init__()
        from TTS.tts.layers.glow_tts.duration_predictor import DurationPredictor
        from TTS.tts.layers.vits.networks import PosteriorEncoder

        self.enc_p = _text_encoder_class()(n_vocab, n_tones, n_languages, inter, hidden, ffn, heads, encoder_layers,
                                           3, dropout, speaker_channels if speaker_text_encoder else 0, bert_channels)
        self.enc_q = PosteriorEncoder(bins, inter, hidden, 5, 1, posterior_layers, cond_channels=speaker_channels)
        self.flow = coupling_flow(inter, hidden, flows, speaker_channels, transformer_flow, heads, ffn, dropout)
        self.dp = DurationPredictor(hidden, 192, 3, 0.5, cond_channels=speaker_channels)
        self.vocoder, self.hop = vocoder, hop
        if vocoder == "hifigan":
            self.dec = hifigan_generator(inter, hop, generator_channels, speaker_channels)
        else:
            self.dec = SpectrogramDecoder(inter, hidden, bins, decoder_layers, speaker_channels)
        self.emb_g = nn.Embedding(n_speakers, speaker_channels)

    def forward(self, phones: torch.Tensor, tones: torch.Tensor, languages: torch.Tensor,
                phone_lengths: torch.Tensor, spec: torch.Tensor, spec_lengths: torch.Tensor,
                speakers: torch.Tensor, prior_weight: float = 0.0, segment_frames: int = 32,
                mas_noise: float = 0.0, bert: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The ``kl`` and ``duration`` losses of one batch and the frames' ``mask``, with — for the spectrogram
        decoder — the predicted spectrogram ``spec_hat``, or — for HiFi-GAN — the waveform ``wave_hat`` of a
        random segment of ``segment_frames`` latent frames per clip starting at frame ``segment_starts``.
        ``prior_weight`` weighs the alignment prior (``log_alignment_prior``) in the alignment search;
        ``mas_noise`` is VITS2's noise-scaled alignment search (Gaussian noise of that many standard deviations
        of the scores added to them, so early alignments explore); ``bert`` are per-phone BERT features
        ``[B, L, C]`` when the network takes them."""
        import monotonic_alignment_search as mas

        g = self.emb_g(speakers).unsqueeze(-1)
        h, m_p, logs_p, x_mask = self.enc_p(phones, tones, languages, phone_lengths, g=g, bert=bert)
        z, m_q, logs_q, y_mask = self.enc_q(spec, spec_lengths, g=g)
        z_p = self.flow(z, y_mask, g=g)
        with torch.no_grad():  # monotonic alignment search on the prior's log-likelihood of each frame
            s_p_sq_r = torch.exp(-2 * logs_p)
            neg_cent = (torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, [1], keepdim=True)
                        + torch.matmul(-0.5 * (z_p ** 2).transpose(1, 2), s_p_sq_r)
                        + torch.matmul(z_p.transpose(1, 2), m_p * s_p_sq_r)
                        + torch.sum(-0.5 * (m_p ** 2) * s_p_sq_r, [1], keepdim=True))  # [B, F, L]
            if prior_weight > 0:
                neg_cent = neg_cent + prior_weight * log_alignment_prior(phone_lengths, spec_lengths, neg_cent.shape)
            if mas_noise > 0:
                neg_cent = neg_cent + torch.std(neg_cent) * torch.randn_like(neg_cent) * mas_noise
            attn_mask = x_mask.unsqueeze(-1) * y_mask.unsqueeze(2)  # [B, 1, L, F]
            attn = mas.maximum_path(neg_cent.transpose(1, 2).contiguous(), attn_mask.squeeze(1)).detach()
        durations = attn.sum(2)  # [B, L]
        log_durations = torch.log(durations + 1e-6).unsqueeze(1) * x_mask
        predicted = self.dp(h.detach(), x_mask, g=g.detach())
        duration = torch.sum((predicted - log_durations) ** 2) / torch.sum(x_mask)
        m_frames = torch.matmul(m_p, attn)  # [B, C, F]
        logs_frames = torch.matmul(logs_p, attn)
        kl = logs_frames - logs_q - 0.5 + 0.5 * (z_p - m_frames) ** 2 * torch.exp(-2.0 * logs_frames)
        kl = torch.sum(kl * y_mask) / torch.sum(y_mask)
        out = {"kl": kl, "duration": duration, "mask": y_mask,  # and what a duration discriminator judges:
               "text_states": h.detach(), "text_mask": x_mask, "speaker": g.detach(),
               "log_durations": log_durations, "predicted_log_durations": predicted * x_mask}
        if self.vocoder == "hifigan":
            from TTS.tts.utils.helpers import rand_segments

            segments, out["segment_starts"] = rand_segments(z, spec_lengths, segment_frames, let_short_samples=True,
                                                            pad_short=True)
            out["wave_hat"] = self.dec(segments, g=g)
        else:
            out["spec_hat"] = self.dec(z * y_mask, y_mask, g)
        return out

    def decode(self, z: torch.Tensor, y_mask: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Latent frames → log-magnitude spectrogram ``[B, bins, F]`` or waveform ``[B, 1, F × hop]``."""
        if self.vocoder == "hifigan":
            wave = self.dec(z * y_mask, g=g)
            return wave * torch.repeat_interleave(y_mask, self.hop, dim=2)
        return self.dec(z * y_mask, y_mask, g)

    @torch.no_grad()
    def infer(self, phones: torch.Tensor, tones: torch.Tensor, languages: torch.Tensor, phone_lengths: torch.Tensor,
              speakers: torch.Tensor, noise_scale: float | torch.Tensor = 0.667,
              length_scale: float | torch.Tensor = 1.0, max_frames: int = 4000,
              generator: torch.Generator | None = None,
              bert: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Spectrograms ``[B, bins, F]`` (or, with HiFi-GAN, waveforms ``[B, 1, F × hop]``) and their frame
        counts for phone sequences (durations predicted).

        ``noise_scale`` and ``length_scale`` are numbers or per-item ``[B]`` tensors; the prior's noise comes
        from ``generator`` (the global generator when ``None``). Traceable for ONNX: no shape leaves the graph
        as a Python number.
        """
        from TTS.tts.utils.helpers import generate_path, sequence_mask

        g = self.emb_g(speakers).unsqueeze(-1)
        h, m_p, logs_p, x_mask = self.enc_p(phones, tones, languages, phone_lengths, g=g, bert=bert)
        per_item = lambda value: torch.as_tensor(value, dtype=m_p.dtype, device=m_p.device).reshape(-1, 1, 1)  # noqa: E731
        w = torch.exp(self.dp(h, x_mask, g=g)) * x_mask * per_item(length_scale)
        w_ceil = torch.ceil(w).clamp(max=max_frames)
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(y_lengths).unsqueeze(1).to(x_mask.dtype)
        attn = generate_path(w_ceil.squeeze(1), x_mask.transpose(1, 2) * y_mask)  # [B, L, F]: phone → its frames
        m_frames, logs_frames = torch.matmul(m_p, attn), torch.matmul(logs_p, attn)
        if generator is None:
            noise = torch.randn_like(m_frames)
        else:
            noise = torch.randn(m_frames.shape, generator=generator, device=m_frames.device, dtype=m_frames.dtype)
        z_p = m_frames + noise * torch.exp(logs_frames) * per_item(noise_scale)
        z = self.flow(z_p, y_mask, g=g, reverse=True)
        return self.decode(z, y_mask, g), y_lengths
