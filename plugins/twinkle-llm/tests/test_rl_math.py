"""Reinforcement learning's arithmetic (``twinkle_llm.rl``) is the published formulas', each checked against an
independent plain-Python computation of the formula on fixed numbers (within 1e-6); and the built-in rewards
(``twinkle_llm.rewards``) score what their descriptions say, through ``twinkle_core.rewards``; the ``local``
rollout engine's decoding is ``generate``'s and samples the softmax's distribution."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from twinkle_core.errors import TwinkleError
from twinkle_core.rewards import RewardError, resolve_rewards, score
from twinkle_llm import rl
from twinkle_llm.rl import group_advantages, kl_penalty, policy_loss, sample_completions


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 6, generator=generator, dtype=torch.float64) * 3
    now = old + (torch.rand(4, 6, generator=generator, dtype=torch.float64) - 0.5) * 0.8  # ratios 0.67 … 1.5
    ref = old + (torch.rand(4, 6, generator=generator, dtype=torch.float64) - 0.5) * 0.4
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]],
                        dtype=torch.float64)
    return {"now": now, "old": old, "ref": ref, "mask": mask, "adv": torch.tensor([1.5, -0.5, 0.25, -1.0],
                                                                                 dtype=torch.float64)}


def _by_hand(b: dict[str, torch.Tensor], low: float, high: float, beta: float, normalisation: str) -> float:
    """GRPO's loss token by token, in plain Python floats."""
    rows = []
    for i in range(4):
        terms = []
        for t in range(6):
            if not b["mask"][i, t]:
                continue
            ratio = math.exp(float(b["now"][i, t] - b["old"][i, t]))
            a = float(b["adv"][i])
            objective = min(ratio * a, min(max(ratio, 1 - low), 1 + high) * a)
            d = float(b["ref"][i, t] - b["now"][i, t])
            terms.append(-objective + beta * (math.exp(d) - d - 1))
        rows.append(terms)
    if normalisation == "sequence":  # DeepSeekMath: mean over completions of each one's token mean
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if normalisation == "token":  # DAPO: every completion token weighs the same
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (4 * 6)  # Dr. GRPO: completions × the longest allowed


@pytest.mark.parametrize("normalisation", ["sequence", "token", "constant"])
@pytest.mark.parametrize(("low", "high", "beta"), [(0.2, 0.2, 0.0), (0.2, 0.28, 0.04)])
def test_the_grpo_loss_is_the_published_formula_under_each_normalisation(normalisation: str, low: float,
                                                                         high: float, beta: float) -> None:
    """The clipped surrogate plus ``beta × k3``, averaged per sequence (GRPO), per token (DAPO) or over a constant
    (Dr. GRPO), with symmetric and "clip higher" bounds, equals the hand computation within 1e-6; its gradient
    is zero on tokens the clip took (positive advantage above ``1 + high``)."""
    b = _batch()
    now = b["now"].clone().requires_grad_(True)
    result = policy_loss(now, b["old"], b["adv"], b["mask"], clip_low=low, clip_high=high,
                         normalisation=normalisation, ref_logprobs=b["ref"] if beta else None, beta=beta)
    assert float(result.loss.detach()) == pytest.approx(_by_hand(b, low, high, beta, normalisation), abs=1e-6)
    result.loss.backward()
    ratio = torch.exp(b["now"] - b["old"])
    took = (ratio > 1 + high) & (b["adv"].unsqueeze(1) > 0) & b["mask"].bool()
    if not beta:
        assert bool(took.any()) and float(now.grad[took].abs().max()) == 0.0
    tokens = b["mask"].sum()
    assert result.clip_fraction == pytest.approx(float((
        ((ratio > 1 + high) & (b["adv"].unsqueeze(1) > 0)) | ((ratio < 1 - low) & (b["adv"].unsqueeze(1) < 0))
    ).double().mul(b["mask"]).sum() / tokens))


def test_k3_is_nonnegative_zero_where_the_policies_agree_and_the_published_expression() -> None:
    """``k3 = exp(ref - logp) - (ref - logp) - 1``: 0 for equal log-probabilities, ≥ 0 always, by hand elsewhere."""
    logp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    ref = torch.tensor([-1.0, -1.0, -3.0], dtype=torch.float64)
    got = kl_penalty(logp, ref).tolist()
    assert got[0] == 0.0 and all(v >= 0 for v in got)
    assert got[1] == pytest.approx(math.exp(1.0) - 1.0 - 1) and got[2] == pytest.approx(math.exp(-2.5) + 2.5 - 1)


def test_group_advantages_are_grpos_dr_grpos_and_rloos() -> None:
    """Per prompt: GRPO ``(r - mean) / (std + 1e-4)`` (sample standard deviation, as DeepSeekMath and TRL), Dr.
    GRPO ``r - mean``, RLOO ``r - mean of the others``, by hand; a group whose rewards are equal gets 0; groups of
    one and an unknown method are named errors."""
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    for row, r in enumerate(rewards.tolist()):
        mean = sum(r) / 4
        std = math.sqrt(sum((x - mean) ** 2 for x in r) / 3)
        assert group_advantages(rewards)[row].tolist() == pytest.approx([(x - mean) / (std + 1e-4) for x in r])
        assert group_advantages(rewards, scale=False)[row].tolist() == pytest.approx([x - mean for x in r])
        others = [(sum(r) - x) / 3 for x in r]
        assert group_advantages(rewards, "rloo")[row].tolist() == pytest.approx([x - o for x, o in zip(r, others)])
    assert group_advantages(rewards)[1].abs().max() == 0
    with pytest.raises(TwinkleError, match="groups of 2 or more"):
        group_advantages(torch.ones(3, 1))
    with pytest.raises(TwinkleError, match="advantages='ppo' is not a method; choose one of grpo, rloo"):
        group_advantages(rewards, "ppo")
    with pytest.raises(TwinkleError, match="loss_normalisation='batch'"):
        policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), normalisation="batch")


def test_the_built_in_rewards_score_answers_formats_and_lengths() -> None:
    """``exact_answer`` compares numbers as numbers after the last answer marker and text whole; ``format`` matches
    a regex; ``length_penalty`` is 0 up to its limit; weights combine them; a row without an answer, a reward that
    raises or gives NaN, and a bad pattern are ``RewardError``s naming the reward and the prompt."""
    rows = [{"prompt": "2+2=", "answer": "4"}, {"prompt": "3*3=", "answer": "9"}, {"prompt": "hi", "answer": "Hello"}]
    completions = ["so the answer is 4.0", "#### 8", "hello."]
    with pytest.raises(RewardError, match="reward 'format' was given no options: .*'pattern'"):
        resolve_rewards({"exact_answer": 1.0, "format": 0.5})  # format needs its pattern
    rewards = resolve_rewards(["exact_answer", {"name": "format", "weight": 0.5, "pattern": r".*\d.*"},
                               {"name": "length_penalty", "weight": 2.0, "limit": 10}])
    total, parts = score(rewards, completions, rows)
    assert parts["exact_answer"] == [1.0, 0.0, 1.0] and parts["format"] == [1.0, 1.0, 0.0]
    assert parts["length_penalty"] == pytest.approx([-1.0, 0.0, 0.0])  # 20 characters: twice the limit
    assert total == pytest.approx([1.0 + 0.5 - 2.0, 0.5, 1.0])
    with pytest.raises(RewardError, match="lacks \\(it has prompt\\)|which this row lacks"):
        score(resolve_rewards("exact_answer"), ["4"], [{"prompt": "2+2="}])
    with pytest.raises(RewardError, match="reward 'broken' raised ZeroDivisionError.*'2\\+2='"):
        score(resolve_rewards(broken), ["4"], rows[:1])
    with pytest.raises(RewardError, match="reward 'nan_reward' gave nan to the completion of prompt '2\\+2=' \\(#0\\)"):
        score(resolve_rewards(nan_reward), ["4"], rows[:1])
    with pytest.raises(RewardError, match="not a regular expression"):
        resolve_rewards({"name": "format", "pattern": "(("})


def broken(completions, rows):
    """A reward with a bug."""
    return [1 / 0 for _ in completions]


def nan_reward(completions, rows):
    """A reward that returns NaN."""
    return [float("nan") for _ in completions]


def _sampler(small_base: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The small random Llama as the ``local`` engine sees a policy (its model and tokenizer's stops and pad; every
    id below 8 a stop, so completions end at different lengths), and 6 left-padded prompts."""
    from twinkle_llm.folders import load_folder_model

    model = load_folder_model(small_base).eval()
    alg = SimpleNamespace(model=model, tokenizer=SimpleNamespace(stop_ids={2, 5, 7}, pad_id=0))
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(8, 300, (6, 9), generator=generator)
    mask = torch.ones_like(ids)
    ids[:2, :4], mask[:2, :4] = 0, 0
    return alg, ids, mask


def test_the_local_engine_decodes_greedily_as_transformers_generate(small_base: Any, monkeypatch) -> None:
    """Proves the ``local`` engine's own decoding loop — each prompt's pass shared by its group, stopped rows
    leaving the batch and its cache — gives exactly transformers' ``generate``'s greedy tokens on left-padded
    prompts, the same trimmed length, pad ids after a stop and a mask up to and including the stop; and that for a
    model sharded over processes (every rank decoding every step) the tokens are the same, padded to the limit."""
    alg, ids, mask = _sampler(small_base)
    alg.tokenizer.stop_ids = set()
    free, _ = sample_completions(alg, ids, mask, 1, 24, 0.0)  # the random model never writes its end of text
    stops = {int(free[0, 3]), int(free[2, 9])}  # so stops are chosen from what it writes: rows end apart
    alg.tokenizer.stop_ids = stops
    tokens, kept = sample_completions(alg, ids, mask, 3, 24, 0.0)
    prompts = ids.repeat_interleave(3, 0)
    with torch.no_grad():
        reference = alg.model.generate(input_ids=prompts, attention_mask=mask.repeat_interleave(3, 0),
                                       do_sample=False, max_new_tokens=24, eos_token_id=sorted(stops),
                                       pad_token_id=0)
    assert torch.equal(tokens, reference[:, prompts.shape[1]:])
    lengths = kept.sum(1).tolist()
    assert min(lengths) <= 4 < max(lengths), lengths  # rows left the batch while others went on
    for row, keep in zip(tokens.tolist(), kept.tolist()):
        end = next((i for i, t in enumerate(row) if t in stops), len(row) - 1)
        assert keep == [1] * (end + 1) + [0] * (len(row) - end - 1)
        assert all(t == 0 for t in row[end + 1:])
    monkeypatch.setattr(rl, "_sharded", lambda model: True)
    synced, synced_kept = sample_completions(alg, ids, mask, 3, 24, 0.0)
    assert synced.shape[1] == 24 and torch.equal(synced[:, :tokens.shape[1]], tokens)
    assert not synced[:, tokens.shape[1]:].any() and torch.equal(synced_kept[:, :tokens.shape[1]], kept)


def test_the_local_engine_samples_tokens_with_their_softmax_probabilities(small_base: Any) -> None:
    """Proves the Gumbel-max draw samples each first token with ``softmax(logits / T)``'s probability: over 20,000
    completions of one prompt, Pearson's chi-square statistic of the token counts against that distribution is
    within 5 standard deviations of its expectation (its degrees of freedom), while against the distribution at
    another temperature it is far beyond (so the check can fail)."""
    alg, ids, mask = _sampler(small_base)
    with torch.no_grad():  # the random model's logits are nearly flat: scaled up, they spread over a few dozen ids
        alg.model.lm_head.weight *= 3 / float(alg.model(input_ids=ids[2:3]).logits[0, -1].std())
    torch.manual_seed(0)
    tokens, _ = sample_completions(alg, ids[2:3], mask[2:3], 20_000, 1, 0.7)
    counts = torch.bincount(tokens[:, 0], minlength=300).double()
    with torch.no_grad():
        logits = alg.model(input_ids=ids[2:3]).logits[0, -1].double()

    def chi_square(temperature: float) -> tuple[float, float]:
        expected = torch.softmax(logits / temperature, -1) * tokens.shape[0]
        bins = expected >= 5  # the statistic's usual validity rule; the few rarer tokens are left out
        dof = int(bins.sum()) - 1
        return float(((counts[bins] - expected[bins]) ** 2 / expected[bins]).sum()), dof

    statistic, dof = chi_square(0.7)
    assert dof > 20 and statistic < dof + 5 * math.sqrt(2 * dof), (statistic, dof)
    statistic, dof = chi_square(0.8)
    assert statistic > dof + 20 * math.sqrt(2 * dof), (statistic, dof)
