"""The LoRA backend's sampling (what ``twinkle serve --tinker`` answers a ``sample`` request with): a request's
samples are decoded together, and each one is still what the model gives that sequence alone; ``top_k`` and
``top_p`` cut the tempered distribution and draw from what is left with its renormalised probabilities."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from twinkle_core.lowlevel import SampleSettings, ScoresWanted
from twinkle_llm.backend import LoraBackend, choose_tokens

PROMPT = [5, 9, 14, 20, 27]


def test_a_requests_samples_decoded_together_are_each_scored_as_the_model_scores_them(small_base: Path) -> None:
    """Proves the batched decoding keeps each sample on its own sequence while the batch shrinks: 8 samples of one
    prompt, stop tokens chosen from what the model writes so that samples end at different lengths (one within 3
    tokens, another running on); each sample's log-probabilities and top-3 tokens equal a pass of the model over the
    prompt and that sample alone (1e-4), each ends at its first stop token ('stop') or at ``max_tokens``
    ('length'), and the same seed draws the same samples again."""
    backend = LoraBackend({"tiny": str(small_base)})
    free, _ = backend.sample("tiny", PROMPT, 8, SampleSettings(max_tokens=12, temperature=1.0, seed=3, stop=[]),
                             ScoresWanted())
    stops = {free[0].tokens[2], free[1].tokens[7]}  # the same seed draws the same tokens until a sample stops
    settings = SampleSettings(max_tokens=12, temperature=1.0, seed=3, stop=sorted(stops))
    samples, _ = backend.sample("tiny", PROMPT, 8, settings, ScoresWanted(sampled_top=3))
    again, _ = backend.sample("tiny", PROMPT, 8, settings, ScoresWanted(sampled_top=3))
    assert [s.tokens for s in samples] == [s.tokens for s in again]
    lengths = [len(s.tokens) for s in samples]
    assert min(lengths) <= 3 and max(lengths) > 3, lengths  # samples left the batch while others went on
    assert len({tuple(s.tokens) for s in samples}) > 1
    model = backend._bases["tiny"]["model"]
    for sample in samples:
        first_stop = next((i for i, t in enumerate(sample.tokens) if t in stops), None)
        if sample.stop_reason == "stop":
            assert first_stop == len(sample.tokens) - 1
        else:
            assert first_stop is None and len(sample.tokens) == 12
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([PROMPT + sample.tokens])).logits[0].float()
        scores = torch.log_softmax(logits[len(PROMPT) - 1:-1], dim=-1)
        expected = scores.gather(-1, torch.tensor(sample.tokens)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4)
        best = torch.topk(scores, 3)
        assert [[t for t, _ in row] for row in sample.top] == best.indices.tolist()
        assert torch.allclose(torch.tensor([[v for _, v in row] for row in sample.top]), best.values, atol=1e-4)


@pytest.mark.parametrize("top_k, top_p, kept", [(4, 1.0, 4), (-1, 0.7, None), (6, 0.9, None)])
def test_top_k_and_top_p_draw_from_the_cut_distribution_renormalised(top_k: int, top_p: float,
                                                                     kept: int | None) -> None:
    """Proves ``choose_tokens`` (each row its own draw) samples ``softmax(logits / T)`` cut to the ``top_k`` likeliest
    tokens and then the smallest likeliest set holding ``top_p`` of what is left, renormalised: over 40,000 rows of
    the same logits no token outside the set is drawn, and Pearson's chi-square of the counts against the
    renormalised probabilities is within 5 standard deviations of its degrees of freedom — against the uncut
    distribution it is far beyond; at temperature 0, and with ``top_k`` 1, every row is the argmax."""
    logits = torch.linspace(2.0, -1.5, 12)[torch.randperm(12, generator=torch.Generator().manual_seed(1))]
    settings = SampleSettings(temperature=0.8, top_k=top_k, top_p=top_p)
    rows = 40_000
    drawn = choose_tokens(logits.expand(rows, -1), settings, torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn, minlength=12).double()
    probs = torch.softmax(logits.double() / 0.8, -1)
    order = torch.argsort(probs, descending=True)
    size = top_k if top_k > 0 else 12
    within = probs[order[:size]] / probs[order[:size]].sum()  # top_p applies after top_k, as transformers' warpers
    size = int((torch.cumsum(within, 0) - within < top_p).sum())
    assert kept is None or size == kept
    allowed = torch.zeros(12, dtype=torch.bool)
    allowed[order[:size]] = True
    assert 1 < size < 12 and counts[~allowed].sum() == 0
    cut = torch.where(allowed, probs, 0.0)
    expected = cut / cut.sum() * rows
    dof = size - 1
    statistic = float(((counts[allowed] - expected[allowed]) ** 2 / expected[allowed]).sum())
    assert statistic < dof + 5 * math.sqrt(2 * dof), (statistic, dof)
    uncut = probs[allowed] * rows  # the tempered distribution without the cut
    assert float(((counts[allowed] - uncut) ** 2 / uncut).sum()) > dof + 20 * math.sqrt(2 * dof)
    greedy = torch.full((3,), int(logits.argmax()))
    assert torch.equal(choose_tokens(logits.expand(3, -1), SampleSettings(temperature=0.0), None), greedy)
    assert torch.equal(choose_tokens(logits.expand(3, -1), SampleSettings(temperature=1.0, top_k=1), None), greedy)
