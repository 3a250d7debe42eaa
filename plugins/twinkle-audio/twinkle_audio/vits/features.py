"""Spectrogram features of speech: the STFT's log magnitude and its log-mel projection, and Griffin-Lim back
to a waveform (the fast, vocoder-free path)."""

from __future__ import annotations

import torch
from torch import nn


class Spectrogram(nn.Module):
    """Log-magnitude STFT (``n_fft // 2 + 1`` bins) and log-mel (``n_mels`` bins) of waveforms, frame-aligned.

    Args:
        sample_rate: the audio's rate. n_fft: FFT size (window of the same length). hop: samples per frame.
        n_mels: mel bands (for losses and metrics). f_max: the top mel band's frequency (default: Nyquist).
    """

    def __init__(self, sample_rate: int, n_fft: int = 512, hop: int = 128, n_mels: int = 64,
                 f_max: float | None = None) -> None:
        """Build the window and the mel filterbank."""
        super().__init__()
        from torchaudio.functional import melscale_fbanks

        self.sample_rate, self.n_fft, self.hop, self.n_mels = sample_rate, n_fft, hop, n_mels
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        banks = melscale_fbanks(n_fft // 2 + 1, 0.0, float(f_max or sample_rate / 2), n_mels, sample_rate,
                                norm="slaney", mel_scale="slaney")
        self.register_buffer("mel_basis", banks.T.contiguous(), persistent=False)  # [mels, bins]

    @property
    def bins(self) -> int:
        """Linear-frequency bins."""
        return self.n_fft // 2 + 1

    def frames(self, samples: torch.Tensor) -> torch.Tensor:
        """How many frames ``samples`` (lengths) give."""
        return samples // self.hop

    def log_magnitude(self, audio: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` waveforms → ``[B, bins, T // hop]`` log magnitudes (clamped at 1e-5)."""
        pad = (self.n_fft - self.hop) // 2
        padded = nn.functional.pad(audio.unsqueeze(1), (pad, pad + self.hop), mode="reflect").squeeze(1)
        spec = torch.stft(padded, self.n_fft, self.hop, window=self.window, center=False, return_complex=True)
        frames = audio.shape[-1] // self.hop
        return torch.log(spec.abs().clamp_min(1e-5))[..., :frames]

    def log_mel(self, log_magnitude: torch.Tensor) -> torch.Tensor:
        """Log magnitudes ``[B, bins, F]`` → log-mel ``[B, n_mels, F]``."""
        return torch.log(torch.matmul(self.mel_basis, log_magnitude.exp()).clamp_min(1e-5))

    def griffin_lim(self, log_magnitude: torch.Tensor, iterations: int = 32) -> torch.Tensor:
        """Log magnitudes ``[B, bins, F]`` → waveforms ``[B, F · hop]`` (Griffin-Lim phase recovery)."""
        from torchaudio.functional import griffinlim

        audio = griffinlim(log_magnitude.exp(), self.window, self.n_fft, self.hop, self.n_fft, power=1.0,
                           n_iter=iterations, momentum=0.99, length=None, rand_init=False)
        return audio[..., :log_magnitude.shape[-1] * self.hop]
