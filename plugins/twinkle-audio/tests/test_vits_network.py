"""The VITS network's parts, without training: the alignment prior is coqui's beta-binomial one, both flows
invert exactly, the text encoder hears the speaker (VITS2), the HiFi-GAN generator gives ``hop`` samples per
frame, the duration discriminator judges each phone within its mask, and add_blank interleaves blanks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from twinkle_audio.melotts import _with_blanks
from twinkle_audio.vits.network import VitsMel, coupling_flow, hifigan_generator, log_alignment_prior


def test_the_alignment_prior_is_coquis_beta_binomial_prior() -> None:
    from TTS.tts.utils.helpers import compute_attn_prior

    prior = log_alignment_prior(torch.tensor([7, 5]), torch.tensor([20, 12]), torch.Size([2, 20, 7]))
    assert np.allclose(prior[0].numpy(), np.log(compute_attn_prior(7, 20)), atol=1e-4)
    assert np.allclose(prior[1, :12, :5].numpy(), np.log(compute_attn_prior(5, 12)), atol=1e-4)
    assert prior[1, 12:].abs().max() == 0 and prior[1, :, 5:].abs().max() == 0  # padding untouched


@pytest.mark.parametrize("transformer", [False, True])
def test_both_flows_invert_exactly(transformer: bool) -> None:
    torch.manual_seed(0)
    flow = coupling_flow(16, 32, 4, 8, transformer, heads=2, ffn=32).eval()
    for layer in flow.flows:  # leave the identity initialisation, so the test sees real couplings
        torch.nn.init.normal_(layer.post.weight, std=0.1)
    x, g = torch.randn(2, 16, 30), torch.randn(2, 8, 1)
    mask = torch.ones(2, 1, 30)
    mask[1, :, 20:] = 0
    with torch.no_grad():
        z = flow(x * mask, mask, g=g)
        back = flow(z, mask, g=g, reverse=True)
    assert not torch.allclose(z, x * mask, atol=1e-3)
    assert torch.allclose(back, x * mask, atol=1e-5)


def test_the_text_encoder_hears_the_speaker_only_when_vits2_conditions_it() -> None:
    torch.manual_seed(0)
    phones = torch.randint(1, 50, (1, 9))
    args = (phones, torch.zeros_like(phones), torch.ones_like(phones), torch.tensor([9]))
    for conditioned in (True, False):
        net = VitsMel(60, 9, 3, 2, 129, hidden=32, inter=32, ffn=64, speaker_channels=16,
                      speaker_text_encoder=conditioned).eval()
        with torch.no_grad():
            first, second = (net.enc_p(*args, g=net.emb_g(torch.tensor([s])).unsqueeze(-1))[1] for s in (0, 1))
        assert torch.allclose(first, second) is not conditioned


def test_the_hifigan_generator_gives_hop_samples_per_frame() -> None:
    for hop in (64, 128, 256):
        generator = hifigan_generator(16, hop, 32, 8).eval()
        with torch.no_grad():
            wave = generator(torch.randn(1, 16, 10), g=torch.randn(1, 8, 1))
        assert wave.shape == (1, 1, 10 * hop) and wave.abs().max() <= 1
    with pytest.raises(ValueError, match="hop 100"):
        hifigan_generator(16, 100, 32, 8)


def test_add_blank_puts_the_blank_between_and_around_phones() -> None:
    (spread,), lengths = _with_blanks(torch.tensor([[5, 6, 7], [8, 9, 0]]), lengths=torch.tensor([3, 2]))
    assert spread.tolist() == [[0, 5, 0, 6, 0, 7, 0], [0, 8, 0, 9, 0, 0, 0]] and lengths.tolist() == [7, 5]


def test_the_duration_discriminator_gives_masked_per_phone_probabilities() -> None:
    from twinkle_audio.vits.network import DurationDiscriminator

    torch.manual_seed(0)
    judge = DurationDiscriminator(32, channels=16, speaker_channels=8).eval()
    states, mask = torch.randn(2, 32, 7), torch.ones(2, 1, 7)
    mask[1, :, 5:] = 0
    with torch.no_grad():
        p = judge(states, mask, torch.randn(2, 1, 7), torch.randn(2, 8, 1))
    assert p.shape == (2, 1, 7) and 0 <= float(p.min()) and float(p.max()) <= 1
    assert p[1, :, 5:].abs().max() == 0 and p[1, :, :5].min() > 0
