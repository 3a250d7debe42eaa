"""Reinforcement learning's arithmetic for language models, as the published methods define it.

- ``group_advantages``: each completion's advantage within its prompt's group — GRPO's (DeepSeekMath, Shao et al.
  2024): ``(r - mean) / (std + eps)``; without the division (``scale=False``) Dr. GRPO's (Liu et al. 2025); RLOO's
  (Ahmadian et al. 2024): ``r - mean of the group's others``.
- ``kl_penalty``: the per-token KL estimate to a reference policy that GRPO adds to its loss (Schulman's ``k3``:
  ``exp(ref - logp) - (ref - logp) - 1``, unbiased and never negative).
- ``policy_loss``: the clipped surrogate ``-min(ratio × A, clip(ratio, 1 - clip_low, 1 + clip_high) × A)`` per
  token (``ratio = exp(logp - logp_old)``, ``logp_old`` the policy's when it sampled; ``clip_high`` above
  ``clip_low`` is DAPO's "clip higher"), plus ``beta × k3``, averaged as ``normalisation`` says:

  | ``normalisation`` | the loss | published as |
  | --- | --- | --- |
  | ``"sequence"`` | the mean over completions of each one's mean over its tokens | GRPO (DeepSeekMath) |
  | ``"token"`` | the mean over every completion token of the batch | DAPO (Yu et al. 2025) |
  | ``"constant"`` | the sum over tokens divided by completions × ``max_length`` | Dr. GRPO (Liu et al. 2025) |

  Per sequence, a long completion's tokens weigh less than a short one's; per token, each token weighs the same;
  the constant denominator keeps neither a length bias nor a per-batch scale.

Tensors are ``[completions, tokens]`` with a mask of the completion tokens (prompt and padding are 0).

The ``reinforcement_learning`` task's step (``rl_loss``) puts them together: ``group_size`` completions of each
prompt sampled from the current policy (``sample_completions``), scored by the run's rewards
(``twinkle_core.rewards``), group advantages, and the policy loss on the completion tokens' log-probabilities
(``token_logprobs``), with the KL term to the reference model when ``kl_coef`` is set; validation answers the
held-out prompts greedily and averages their rewards (``rl_sums``, ``rl_figures``). With ``updates_per_rollout``
above 1 the loader brings each optimizer step's prompts back that many times in a row and their rollout
(``new_rollout``: completions, advantages, the sampling policy's log-probabilities) is kept in a ``RolloutBuffer``
until it has made that many updates — from the second on, the ratio to the sampling policy is no longer 1 and the
clipping bounds it (PPO's epochs; TRL's ``num_iterations``). The buffer is each rank's ``rank_state``, so a run
resumed between those updates continues them exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from twinkle_core.errors import HyperparameterError, TwinkleError

Normalisation = Literal["sequence", "token", "constant"]
NORMALISATIONS: tuple[str, ...] = ("sequence", "token", "constant")
ADVANTAGES: tuple[str, ...] = ("grpo", "rloo")


def group_advantages(rewards: torch.Tensor, method: str = "grpo", scale: bool = True, eps: float = 1e-4
                     ) -> torch.Tensor:
    """Advantages of ``rewards`` ``[prompts, group]`` (each row one prompt's completions), the same shape.

    Args:
        rewards: one reward per completion, a row per prompt.
        method: ``"grpo"`` (minus the group's mean, divided by its standard deviation when ``scale``) or ``"rloo"``
            (minus the mean of the group's other completions).
        scale: GRPO's division by the group's standard deviation (``False``: Dr. GRPO).
        eps: added to the standard deviation (a group whose completions all earned the same gets 0).

    Raises:
        TwinkleError: an unknown method, or groups of one completion (nothing to compare with).
    """
    if method not in ADVANTAGES:
        raise TwinkleError(f"advantages='{method}' is not a method; choose one of {', '.join(ADVANTAGES)}")
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise TwinkleError(f"advantages compare completions of one prompt: give groups of 2 or more (rewards of "
                           f"shape {tuple(rewards.shape)})")
    mean = rewards.mean(dim=1, keepdim=True)
    if method == "rloo":
        size = rewards.shape[1]
        return (rewards - mean) * size / (size - 1)  # r - (sum - r) / (size - 1)
    centred = rewards - mean
    return centred / (rewards.std(dim=1, keepdim=True) + eps) if scale else centred


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """``k3`` per token: ``exp(ref - logp) - (ref - logp) - 1`` (≥ 0; 0 where the two agree)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


@dataclass(frozen=True)
class PolicyLoss:
    """``policy_loss``'s result.

    Attributes:
        loss: the scalar to minimise.
        clip_fraction: the share of completion tokens whose ratio was clipped (the clipped term won and carries no
            gradient).
        kl: the mean ``k3`` over completion tokens (0 without a reference).
        ratio: the mean probability ratio over completion tokens.
    """

    loss: torch.Tensor
    clip_fraction: float
    kl: float
    ratio: float


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                *, clip_low: float = 0.2, clip_high: float = 0.2, normalisation: str = "sequence",
                max_length: int | None = None, ref_logprobs: torch.Tensor | None = None, beta: float = 0.0
                ) -> PolicyLoss:
    """The clipped policy loss of a batch of completions (see the module's table for ``normalisation``).

    Args:
        logprobs: ``[B, T]`` the policy's log-probabilities of the sampled tokens now (with gradients).
        old_logprobs: ``[B, T]`` the same when they were sampled (no gradient).
        advantages: ``[B]`` one per completion (or ``[B, T]`` per token).
        mask: ``[B, T]`` 1 on completion tokens.
        clip_low: the ratio is clipped below at ``1 - clip_low``.
        clip_high: the ratio is clipped above at ``1 + clip_high``.
        normalisation: ``"sequence"``, ``"token"`` or ``"constant"``.
        max_length: the constant normalisation's length (default ``T``).
        ref_logprobs: ``[B, T]`` the reference policy's, for the KL term.
        beta: the KL term's weight.

    Raises:
        TwinkleError: an unknown normalisation, clipping bounds that are not ≥ 0, a KL weight without a reference.
    """
    if normalisation not in NORMALISATIONS:
        raise TwinkleError(f"loss_normalisation='{normalisation}' is not one; choose one of "
                           f"{', '.join(NORMALISATIONS)}")
    if clip_low < 0 or clip_high < 0 or clip_low >= 1:
        raise TwinkleError(f"clip_low={clip_low}, clip_high={clip_high}: give 0 ≤ clip_low < 1 and clip_high ≥ 0 "
                           "(the ratio is kept in [1 - clip_low, 1 + clip_high])")
    if beta and ref_logprobs is None:
        raise TwinkleError(f"beta={beta} weighs a KL term to a reference policy, and none was given")
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs.detach())
        per_token = per_token + beta * kl
    tokens = mask.sum().clamp(min=1)
    if normalisation == "sequence":
        loss = ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    elif normalisation == "token":
        loss = (per_token * mask).sum() / tokens
    else:
        loss = (per_token * mask).sum() / (logprobs.shape[0] * (max_length or logprobs.shape[1]))
    was_clipped = ((ratio < 1 - clip_low) & (adv < 0)) | ((ratio > 1 + clip_high) & (adv > 0))
    return PolicyLoss(loss, float((was_clipped.to(mask.dtype) * mask).sum() / tokens),
                      float((kl.detach() * mask).sum() / tokens), float((ratio.detach() * mask).sum() / tokens))



# ------------------------------------------------------------------ the reinforcement_learning task's step
RL_TASK = "reinforcement_learning"
"""The task whose training samples completions, scores them and follows the policy gradient (GRPO)."""


@dataclass
class RLSettings:
    """How a ``reinforcement_learning`` run trains (``CausalLM``'s hyperparameters of the same names).

    Attributes:
        rewards: the rewards and their weights (``twinkle_core.rewards.resolve_rewards``).
        group_size: completions sampled per prompt (GRPO's group, G).
        max_new_tokens: the longest completion.
        temperature: the sampling temperature (1: the policy's own distribution).
        kl_coef: the KL term's weight (GRPO's β; 0: no reference model is run).
        clip_low: the ratio's lower clipping bound is ``1 - clip_low``.
        clip_high: its upper one ``1 + clip_high``.
        loss_normalisation: ``sequence``, ``token`` or ``constant`` (``policy_loss``).
        advantages: ``grpo`` or ``rloo``.
        scale_rewards: GRPO's division by the group's standard deviation.
        pass_threshold: the weighted reward at which a completion counts as solving its prompt (``pass@k``).
        updates_per_rollout: optimizer steps each rollout batch makes (PPO's epochs, TRL's ``num_iterations``).
        engine: what samples the completions (``rollout_engine``; the ``local`` one by default).
    """

    rewards: list[Any]
    group_size: int = 8
    max_new_tokens: int = 64
    temperature: float = 1.0
    kl_coef: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    loss_normalisation: str = "token"
    advantages: str = "grpo"
    scale_rewards: bool = True
    pass_threshold: float = 1.0
    updates_per_rollout: int = 1
    engine: RolloutEngine = field(default_factory=lambda: LocalEngine())


@dataclass(eq=False)
class Rollout:
    """One micro-batch's sampled and scored completions, kept for the updates still to be made on them.

    Attributes:
        ids: the prompts' tokens ``[B, L]`` (left-padded), as the loader gave them.
        mask: their attention mask.
        completions: ``[B·G, T]`` the sampled tokens, a prompt's group together.
        completion_mask: 1 on completion tokens (up to and including the first stop).
        advantages: ``[B·G]`` one per completion.
        old_logprobs: ``[B·G, T]`` the sampling policy's log-probabilities (``None`` with one update: the ratio is 1).
        ref_logprobs: ``[B·G, T]`` the reference model's (``None`` without a KL term).
        figures: the step figures of the sampling (rewards, their spread, each reward's mean).
        uses: the updates made on it so far.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    completions: torch.Tensor
    completion_mask: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    figures: dict[str, float]
    uses: int = 0

    TENSORS = ("ids", "mask", "completions", "completion_mask", "advantages", "old_logprobs", "ref_logprobs")


class RolloutBuffer:
    """The rollouts of the current optimizer step's micro-batches, each reused until it has made ``updates``
    updates (the loader brings the same micro-batches back that many times: ``Algorithm.updates_per_batch``)."""

    def __init__(self, updates: int) -> None:
        """Keep each rollout for ``updates`` updates."""
        self.updates = updates
        self.rollouts: list[Rollout] = []

    def take(self, ids: torch.Tensor, mask: torch.Tensor) -> Rollout | None:
        """The kept rollout of these prompts, counted as used once more (dropped after its last use), or ``None``
        when they have none (a new batch: sample it)."""
        for rollout in self.rollouts:
            if rollout.ids.shape == ids.shape and torch.equal(rollout.ids, ids) and torch.equal(rollout.mask, mask):
                self._use(rollout)
                return rollout
        return None

    def add(self, rollout: Rollout) -> None:
        """Keep a new rollout (its first use is now)."""
        if self.updates > 1:
            self.rollouts.append(rollout)
        self._use(rollout)

    def _use(self, rollout: Rollout) -> None:
        rollout.uses += 1
        if rollout.uses >= self.updates:
            self.rollouts = [kept for kept in self.rollouts if kept is not rollout]

    def state(self) -> list[dict[str, Any]]:
        """The kept rollouts as CPU tensors and plain values (a checkpoint's ``rank_state``)."""
        return [{**{name: None if getattr(r, name) is None else getattr(r, name).detach().cpu()
                    for name in Rollout.TENSORS}, "figures": dict(r.figures), "uses": r.uses} for r in self.rollouts]

    def load(self, state: list[dict[str, Any]], device: torch.device) -> None:
        """Replace the kept rollouts with ``state``'s, on ``device``."""
        self.rollouts = [Rollout(**{name: None if item[name] is None else item[name].to(device)
                                    for name in Rollout.TENSORS}, figures=dict(item["figures"]), uses=int(item["uses"]))
                         for item in state]


class RolloutEngine(ABC):
    """What samples reinforcement learning's completions (``CausalLM(rollout_engine=NAME)``; ``ROLLOUT_ENGINES``).

    The built-in ``local`` engine generates on the training processes with the policy itself (each rank its own
    prompts). An engine that serves the policy elsewhere — vLLM on GPU machines — samples the same way and loads
    the new weights after each optimizer step (``weights_updated``): the step's log-probabilities are always
    recomputed by the training model (``token_logprobs``), so an engine returns tokens only.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def sample(self, alg: Any, ids: torch.Tensor, mask: torch.Tensor, count: int, max_new_tokens: int,
               temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` completions of each left-padded prompt ``ids`` ``[B, L]`` (``mask``: 1 on prompt tokens) by the
        policy ``alg`` as it is now: ``(tokens [B·count, T], mask [B·count, T])``, a prompt's completions together,
        the mask 1 up to and including the first stop token; greedy at ``temperature`` 0."""

    def weights_updated(self, alg: Any) -> None:
        """The policy's weights changed (after each optimizer step): an engine holding its own copy loads them here.
        The local engine samples from the training model itself: nothing to do."""


class LocalEngine(RolloutEngine):
    """Samples on the training process with the policy itself (``sample_completions``: KV-cached decoding with each
    prompt's pass shared by its group; plain sampling at ``temperature``, no top-k or top-p cut), the model in eval
    mode and without gradients."""

    name = "local"

    def sample(self, alg: Any, ids: torch.Tensor, mask: torch.Tensor, count: int, max_new_tokens: int,
               temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """See ``RolloutEngine.sample``."""
        return sample_completions(alg, ids, mask, count, max_new_tokens, temperature)


ROLLOUT_ENGINES: dict[str, type[RolloutEngine]] = {"local": LocalEngine}
"""The rollout engines by name (``register_rollout_engine`` adds one)."""


def register_rollout_engine(engine: type[RolloutEngine]) -> type[RolloutEngine]:
    """Make ``engine`` (a ``RolloutEngine`` subclass with a ``name``) choosable as ``rollout_engine=NAME``; usable as
    a class decorator.

    Raises:
        TwinkleError: no name, or a name another engine has.
    """
    if not engine.name:
        raise TwinkleError(f"{engine.__name__} has no name: set the class attribute name = '...'")
    if ROLLOUT_ENGINES.get(engine.name, engine) is not engine:
        raise TwinkleError(f"rollout engine '{engine.name}' is {ROLLOUT_ENGINES[engine.name].__name__} already; "
                           "choose another name")
    ROLLOUT_ENGINES[engine.name] = engine
    return engine


def rollout_engine(name: str) -> RolloutEngine:
    """A new engine of ``name``.

    Raises:
        HyperparameterError: no engine has that name (the message lists them).
    """
    if name not in ROLLOUT_ENGINES:
        raise HyperparameterError(f"rollout_engine='{name}' is not one; choose one of "
                                  f"{', '.join(sorted(ROLLOUT_ENGINES))}")
    return ROLLOUT_ENGINES[name]()


def sample_completions(alg: Any, ids: torch.Tensor, mask: torch.Tensor, count: int, max_new_tokens: int,
                       temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` completions of each left-padded prompt: ``(tokens [B·count, T], mask [B·count, T])``, a prompt's
    completions together, ``T`` the longest completion's length (at most ``max_new_tokens``), the mask 1 up to and
    including the first stop token, pad ids after it (the ``local`` engine).

    KV-cached decoding over the model's own forward (eval mode, no gradients): each prompt's pass is computed once
    and its cache repeated for its ``count`` completions (prefix sharing, as vLLM's prefix cache does), only the last
    position's logits are computed, completions that reached a stop token leave the batch (their cache rows too),
    and decoding ends when none is left — except where the model is sharded over the job's processes (FSDP2), whose
    ranks must make the same forward calls: there every row decodes ``max_new_tokens`` steps (pad ids after a
    stop), as transformers' ``synced_gpus``. Tokens are drawn by the Gumbel-max trick — the argmax of ``logits /
    temperature`` plus Gumbel noise, which draws each token with exactly its softmax probability, as
    ``torch.multinomial`` does at a quarter of its cost on a CPU — from torch's global generator (so a resumed run's
    restored random state draws the same completions); greedy at ``temperature`` 0, where the tokens are
    transformers' ``generate``'s. No top-k or top-p cut.
    """
    model, stops = alg.model, torch.tensor(sorted(alg.tokenizer.stop_ids), device=ids.device)
    rows = ids.shape[0] * count
    tokens = torch.full((rows, max_new_tokens), alg.tokenizer.pad_id, dtype=torch.long, device=ids.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            positions = (mask.cumsum(1) - 1).clamp(min=0)
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(count)
            attention = mask.repeat_interleave(count, 0)
            position = positions[:, -1:].repeat_interleave(count, 0)
            logits = out.logits[:, -1].float().repeat_interleave(count, 0)
            alive = torch.arange(rows, device=ids.device)  # the rows still decoding, in the cache's order
            synced = _sharded(model)  # every rank makes the same forward calls: no row leaves, no early end
            done = torch.zeros(rows, dtype=torch.bool, device=ids.device)
            taken = 0
            for step in range(max_new_tokens):
                taken = step + 1
                chosen = draw_tokens(logits, temperature)
                if synced:
                    chosen = chosen.masked_fill(done, alg.tokenizer.pad_id)
                tokens[alive, step] = chosen
                going = ~torch.isin(chosen, stops)
                if step == max_new_tokens - 1:
                    break
                if synced:
                    done |= ~going
                elif not bool(going.any()):
                    break
                elif not bool(going.all()):
                    kept = going.nonzero().squeeze(1)
                    cache.batch_select_indices(kept)
                    alive, chosen, attention, position = alive[kept], chosen[kept], attention[kept], position[kept]
                attention = torch.cat([attention, attention.new_ones(attention.shape[0], 1)], 1)
                position = position + 1
                out = model(input_ids=chosen[:, None], attention_mask=attention, position_ids=position, cache=cache,
                            use_cache=True)
                logits = out.logits[:, -1].float()
    finally:
        model.train(was_training)
    tokens = tokens[:, :taken]
    stopped = torch.isin(tokens, stops)
    before_stop = (stopped.long().cumsum(1) - stopped.long()) == 0  # up to and including the first stop
    return tokens, before_stop.long()


def _sharded(model: Any) -> bool:
    """Whether ``model``'s parameters are sharded over the job's processes (FSDP2's ``DTensor``s): each forward
    gathers them collectively, so every rank must make as many forward calls as the others."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 and \
        any(isinstance(p, DTensor) for p in model.parameters())


def draw_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A token per row of ``logits`` ``[N, V]``: the argmax at ``temperature`` 0, else a draw from
    ``softmax(logits / temperature)`` by the Gumbel-max trick (``argmax(logits / T - log(-log U))``, ``U`` uniform
    from ``generator``, torch's global one by default); a ``-inf`` logit is never drawn."""
    if temperature <= 0:
        return logits.argmax(-1)
    uniform = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device)
    uniform.clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits / temperature - uniform.log_().neg_().log_()).argmax(-1)


def token_logprobs(alg: Any, ids: torch.Tensor, mask: torch.Tensor, completions: torch.Tensor,
                   completion_mask: torch.Tensor, reference: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probabilities ``[N, T]`` the policy (or, with ``reference``, the reference model: the base without
    its adapters, or the frozen starting model) gives each completion token after its prompt, and the policy's
    entropy per token (``None`` for the reference)."""
    full = torch.cat([ids, completions], 1)
    attention = torch.cat([mask, completion_mask], 1)
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    start = ids.shape[1] - 1
    if reference:
        logits = alg.reference_logits(full, attention_mask=attention, position_ids=positions)
    else:
        logits = alg.model(input_ids=full, attention_mask=attention, position_ids=positions, use_cache=False).logits
    logp = torch.log_softmax(logits[:, start:-1].float(), dim=-1)
    picked = logp.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    if reference:
        return picked.detach(), None
    entropy = -(logp.exp() * logp).sum(-1).detach()
    return picked, entropy


def completion_texts(alg: Any, completions: torch.Tensor, completion_mask: torch.Tensor) -> list[str]:
    """Each completion's text, up to (without) its stop token."""
    stops = set(alg.tokenizer.stop_ids)
    texts = []
    for tokens, keep in zip(completions.tolist(), completion_mask.tolist()):
        kept = [t for t, k in zip(tokens, keep) if k and t not in stops]
        texts.append(alg.tokenizer.decode(kept))
    return texts


def scored_completions(alg: Any, settings: RLSettings, ids: torch.Tensor, mask: torch.Tensor, rows: list[Any],
                       count: int, temperature: float
                       ) -> tuple[torch.Tensor, torch.Tensor, list[float], dict[str, list[float]]]:
    """``count`` completions of each prompt (``sample_completions``) scored by the run's rewards, each with its
    prompt's row: the tokens, their mask, the weighted rewards and each reward's scores (prompt by prompt, a
    prompt's completions together)."""
    from twinkle_core.rewards import score

    completions, completion_mask = settings.engine.sample(alg, ids, mask, count, settings.max_new_tokens, temperature)
    grouped = [rows[i // count] for i in range(len(rows) * count)]
    total, parts = score(settings.rewards, completion_texts(alg, completions, completion_mask), grouped,
                         [str(r.get("prompt", "")) for r in grouped])
    return completions, completion_mask, total, parts


def new_rollout(alg: Any, settings: RLSettings, batch: Any) -> Rollout:
    """Sample ``group_size`` completions of each prompt of ``batch``, score them, and their advantages within
    each group; with ``updates_per_rollout`` above 1 the sampling policy's log-probabilities too (the later
    updates' ratio is to them), and the reference's with a KL term (both without gradients)."""
    ids, mask, rows = batch
    k = settings.group_size
    completions, completion_mask, total, parts = scored_completions(alg, settings, ids, mask, rows, k,
                                                                    settings.temperature)
    rewards = torch.tensor(total, dtype=torch.float32, device=ids.device).view(-1, k)
    advantages = group_advantages(rewards, settings.advantages, settings.scale_rewards).view(-1)
    prompts, prompt_mask = ids.repeat_interleave(k, 0), mask.repeat_interleave(k, 0)
    old = None
    if settings.updates_per_rollout > 1:
        with torch.no_grad():
            old = token_logprobs(alg, prompts, prompt_mask, completions, completion_mask)[0].detach()
    ref = token_logprobs(alg, prompts, prompt_mask, completions, completion_mask, reference=True)[0] \
        if settings.kl_coef else None
    figures = {"train_reward": float(rewards.mean()), "train_reward_std": float(rewards.std(dim=1).mean())}
    figures.update({f"train_reward_{name}": sum(values) / len(values) for name, values in parts.items()})
    return Rollout(ids, mask, completions, completion_mask, advantages, old, ref, figures)


def rl_loss(alg: Any, settings: RLSettings, batch: Any, buffer: RolloutBuffer | None = None
            ) -> tuple[torch.Tensor, dict[str, float]]:
    """One GRPO step on a batch of prompts: its rollout — sampled and scored now (``new_rollout``), or the one
    kept in ``buffer`` for these prompts when ``updates_per_rollout`` trains on each several times — and the
    clipped policy loss with the KL term (with one update the ratio is 1 and the gradient the policy gradient);
    returns the loss and the step's figures (``train_reward`` and its within-group spread, each reward's mean, KL,
    clip fraction, the mean ratio, completion length, entropy)."""
    ids, mask, _ = batch
    buffer = buffer if buffer is not None else RolloutBuffer(1)
    rollout = buffer.take(ids, mask)
    if rollout is None:
        rollout = new_rollout(alg, settings, batch)
        buffer.add(rollout)
    k = settings.group_size
    prompts, prompt_mask = ids.repeat_interleave(k, 0), mask.repeat_interleave(k, 0)
    logp, entropy = token_logprobs(alg, prompts, prompt_mask, rollout.completions, rollout.completion_mask)
    old = rollout.old_logprobs if rollout.old_logprobs is not None else logp.detach()
    result = policy_loss(logp, old, rollout.advantages, rollout.completion_mask, clip_low=settings.clip_low,
                         clip_high=settings.clip_high, normalisation=settings.loss_normalisation,
                         max_length=settings.max_new_tokens, ref_logprobs=rollout.ref_logprobs,
                         beta=settings.kl_coef)
    cmask = rollout.completion_mask.float()
    figures = {**rollout.figures, "train_kl": result.kl, "train_clip_fraction": result.clip_fraction,
               "train_ratio": result.ratio, "train_completion_length": float(cmask.sum(1).mean()),
               "train_entropy": float((entropy * cmask).sum() / cmask.sum().clamp(min=1)) if entropy is not None
               else 0.0}
    return result.loss, figures


def rl_sums(alg: Any, settings: RLSettings, batch: Any, pass_at_k: bool = False) -> torch.Tensor:
    """The sums over a batch of prompts, each answered greedily and scored: ``[reward sum, prompts, completion
    tokens, prompts passed, each reward's sum...]``. With ``pass_at_k`` (``evaluate``), ``group_size`` completions
    are also sampled per prompt and a prompt passes when one of them earns ``pass_threshold`` or more (pass@k)."""
    ids, mask, rows = batch
    _, completion_mask, total, parts = scored_completions(alg, settings, ids, mask, rows, 1, 0.0)
    passed = 0.0
    if pass_at_k:
        k = settings.group_size
        rewards = scored_completions(alg, settings, ids, mask, rows, k, settings.temperature)[2]
        passed = float(sum(max(rewards[i * k:(i + 1) * k]) >= settings.pass_threshold for i in range(len(rows))))
    values = [sum(total), float(len(rows)), float(completion_mask.sum()), passed]
    values += [sum(parts[w.name]) for w in settings.rewards]
    return torch.tensor(values, dtype=torch.float64, device=ids.device)


def rl_figures(settings: RLSettings, sums: torch.Tensor, prefix: str) -> dict[str, float]:
    """``<prefix>_reward`` (the mean weighted reward of the greedy answers), ``<prefix>_completion_length``, each
    reward's mean and, for ``test``, ``test_pass_at_<k>``, from ``rl_sums`` added over batches (and ranks)."""
    count = float(sums[1].clamp(min=1))
    figures = {f"{prefix}_reward": float(sums[0]) / count, f"{prefix}_completion_length": float(sums[2]) / count}
    if prefix == "test":
        figures[f"test_pass_at_{settings.group_size}"] = float(sums[3]) / count
    figures.update({f"{prefix}_reward_{w.name}": float(sums[4 + i]) / count for i, w in enumerate(settings.rewards)})
    return figures


__all__ = ["ADVANTAGES", "NORMALISATIONS", "RL_TASK", "ROLLOUT_ENGINES", "LocalEngine", "Normalisation", "PolicyLoss",
           "RLSettings", "Rollout", "RolloutBuffer", "RolloutEngine", "completion_texts", "draw_tokens",
           "register_rollout_engine", "rollout_engine", "group_advantages", "kl_penalty", "new_rollout", "policy_loss",
           "rl_figures", "rl_loss", "rl_sums", "sample_completions", "scored_completions", "token_logprobs"]
