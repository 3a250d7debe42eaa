"""``CausalLM``: a decoder-only transformers model (Llama, Qwen2, Qwen3) as a Twinkle algorithm — built from a
preset config with random initialisation, or loaded from a local Hugging Face folder (safetensors only)."""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from twinkle_core import Algorithm, DataSpec
from twinkle_core.data import ModelInput
from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_core.types import NonNegativeInt, PositiveFloat, PositiveInt

from twinkle_llm.chat import DEFAULT_TEMPLATE, ChatTemplate, Messages, check_messages
from twinkle_llm.folders import load_folder_model, read_adapter, read_config
from twinkle_llm.presets import PRESETS
from twinkle_llm.rl import RL_TASK, RLSettings, RolloutBuffer, rl_figures, rl_loss, rl_sums
from twinkle_llm.rl import rollout_engine as make_engine
from twinkle_llm.prompts import Prompt, held_out_prompts
from twinkle_llm.quantized import QuantizeBase, require_bitsandbytes, require_torchao
from twinkle_llm.tokenizing import TextTokenizer


def build_config(model_type: str, settings: dict[str, Any]) -> Any:
    """The transformers config of ``model_type`` (one of ``SUPPORTED``) with ``settings``."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **settings)


GENERATED_TOKENS = 32
"""Tokens generated for each held-out prompt at a validation."""

LORA_ALL = "all-linear"
"""``lora_targets`` meaning every linear layer of the decoder (not the output head), as peft reads it."""


class CausalLM(Algorithm):
    """A decoder-only language model trained on next-token prediction: on every token of raw text
    (``causal_lm``) or on the assistant's tokens of conversations (``instruction_tuning``); ``val_perplexity`` is
    the exponent of the validation loss per predicted token.

    With ``lora_rank`` the model folder's weights stay frozen and only low-rank adapters train (peft); the run's
    checkpoints then hold the adapters alone, and ``weights`` (stored with the run) names the base. Adapters train
    at ``LORA_LR`` unless ``lr`` is given (raw text and conversations; DPO keeps the default).

    Class attributes a family sets: ``family`` (the Hugging Face ``model_type``) and ``default_size``.
    """

    task = "causal_lm"
    family: ClassVar[str] = "llama"
    default_size: ClassVar[str] = "tiny"
    any_folder: ClassVar[bool] = False
    """Whether ``weights`` may name a folder of another supported family (``llm-tiny``: any)."""
    optimizer_defaults: ClassVar[dict[str, Any]] = {"lr": 1e-3, "weight_decay": 0.01, "scheduler": "cosine"}
    LORA_LR: ClassVar[float] = 3e-3
    """The default ``lr`` of LoRA adapters (raw text and instruction tuning): three times the full-weights default.
    Adapters learn best at a higher rate than full fine-tuning (about ten times, in Thinking Machines' "LoRA Without
    Regret", 2025); measured on ``samples.code_words`` (600 chats, rank 16, 1,020 steps), held-out exact match at
    1e-3 0.88, 2e-3 0.89, 3e-3 0.92, 5e-3 0.14, 1e-2 0.18."""
    INSTRUCTION_STEPS: ClassVar[int] = 1000
    """The optimizer steps a default-length instruction tuning trains at least (``min_optimizer_steps``): on
    ``samples.code_words`` 510 steps reached a held-out exact match of 0.44, 1,020 steps 0.92."""

    def __init__(self, size: str | None = None, weights: str | None = None, dropout: float = 0.0,
                 lora_rank: NonNegativeInt = 0, lora_alpha: float | None = None, lora_targets: str = LORA_ALL,
                 lora_dropout: float = 0.0, adapter: str | None = None, beta: PositiveFloat = 0.1,
                 val_generations: NonNegativeInt = 2, fused_loss: bool = True,
                 rewards: str | list[Any] | dict[str, Any] | None = None, group_size: PositiveInt = 8,
                 max_new_tokens: PositiveInt = 64, temperature: float = 1.0, kl_coef: float = 0.0,
                 clip_low: float = 0.2, clip_high: float = 0.2,
                 loss_normalisation: Literal["sequence", "token", "constant"] = "token",
                 advantages: Literal["grpo", "rloo"] = "grpo", scale_rewards: bool = True,
                 pass_threshold: float = 1.0, updates_per_rollout: PositiveInt = 1, rollout_engine: str = "local",
                 quantize_base: QuantizeBase = "auto",
                 task: Literal["causal_lm", "instruction_tuning", "preference_tuning",
                               "reinforcement_learning"] = "causal_lm") -> None:
        """Choose the model.

        Args:
            size: one of the family's preset sizes (``PRESETS``), e.g. ``tiny``, ``1b``; ignored with ``weights``.
            weights: a local Hugging Face model folder (``config.json``, ``*.safetensors``, ``tokenizer.json``)
                to start from; its architecture and tokenizer are used. Never downloaded; pickled ``*.bin``
                weights are refused.
            dropout: attention dropout while training.
            lora_rank: train rank-``lora_rank`` adapters on a frozen base (``weights`` required); 0 trains every
                weight.
            lora_alpha: the adapters' scale numerator (the update is ``alpha / rank · B A``); default ``2 ×
                lora_rank``.
            lora_targets: ``all-linear`` (every linear layer but the output head), or the module names to adapt,
                comma-separated (``q_proj,v_proj``).
            lora_dropout: dropout on the adapters' input while training.
            adapter: LoRA adapters to start from instead of fresh ones: a peft adapter folder (a Tinker API
                checkpoint ``twinkle://USER/tinker/RUN/tinker/weights/NAME``, a ``peft`` export, any peft
                ``save_pretrained``) on the base ``weights`` names. Its rank, scale and layers are the run's (give
                ``lora_rank`` etc. only to confirm them); its ``adapter_model.safetensors`` is loaded, never a pickle.
            beta: DPO's strength (``preference_tuning``): how far the policy may move from the reference; TRL's
                default.
            val_generations: held-out prompts the model answers (greedily, up to 32 tokens) at every validation,
                written to ``generations/step-<N>.jsonl`` in the run beside the data's own answer; 0: none.
            fused_loss: compute the next-token loss through the LM head chunk by chunk, its gradients in the same
                pass, never materialising the whole vocabulary's logits (``twinkle_llm.fused_loss``); ``False``:
                the head's logits, then the loss. Where the head is not a plain linear layer (adapted by LoRA, logit
                soft-capping, split by tensor parallelism, pipelined) the logits path is used whatever this says.
            rewards: ``reinforcement_learning``'s rewards (``twinkle rewards list``): a name, a list, ``{name:
                weight}``, ``{"name": ..., "weight": ..., <option>: ...}`` items, or a ``Reward`` or function from
                code (``twinkle_core.rewards.resolve_rewards``).
            group_size: completions sampled per prompt, compared with each other (GRPO's group; at least 2).
            max_new_tokens: the longest completion sampled, in tokens.
            temperature: the sampling temperature of the rollouts (1: the policy's own distribution).
            kl_coef: the weight of the KL term to the reference model — the base without the adapters with LoRA
                (no extra memory), else a frozen copy of the starting model; 0 (the default, as TRL's) runs none.
            clip_low: the probability ratio is kept above ``1 - clip_low``.
            clip_high: the probability ratio is kept below ``1 + clip_high`` (above ``clip_low``: DAPO's "clip
                higher").
            loss_normalisation: how the per-token losses are averaged: ``token`` (every completion token of the
                batch alike, DAPO's and TRL's default), ``sequence`` (each completion's mean, then their mean:
                DeepSeekMath's GRPO) or ``constant`` (completions × ``max_new_tokens``: Dr. GRPO).
            advantages: ``grpo`` (the reward minus the group's mean, over its standard deviation) or ``rloo`` (minus
                the mean of the group's other completions).
            scale_rewards: GRPO's division by the group's standard deviation (``False``: Dr. GRPO).
            pass_threshold: ``evaluate``'s pass@k of a reinforcement-learning run: a prompt passes when one of
                ``group_size`` sampled completions earns this weighted reward or more (1: a verifiable reward's
                full score).
            updates_per_rollout: optimizer steps each rollout batch makes (PPO's epochs, TRL's ``num_iterations``):
                an optimizer step's prompts are sampled and scored once, then trained on this many times in a row,
                the ratio to the policy that sampled them clipped (1: one update, the ratio 1, the plain policy
                gradient). An epoch is this many times as many steps; above 1 its last incomplete batch is left out.
            rollout_engine: what samples the completions (``twinkle_llm.rl.ROLLOUT_ENGINES``): ``local``, the policy
                itself on the training processes; an engine serving the policy elsewhere (vLLM) registers with
                ``register_rollout_engine`` and is told when the weights change.
            quantize_base: QLoRA — how a LoRA run stores its frozen base (``twinkle_llm.quantized``): ``nf4``
                (the decoder's linear weights in 4-bit NormalFloat with torchao, about 0.26 of their bf16 size; CPU
                and GPU), ``bnb-nf4`` (bitsandbytes' 4-bit, CUDA), ``none`` (full precision) or ``auto`` (NF4 only
                where the fp32 base would take more than half of the device's memory; the plan says which and why).
                The adapters train in the compute precision either way.
            task: ``causal_lm`` (raw text), ``instruction_tuning`` (conversations), ``preference_tuning``
                (DPO on chosen and rejected answers, against the starting model as the reference) or
                ``reinforcement_learning`` (GRPO on prompts: completions sampled, scored by ``rewards``,
                ``twinkle_llm.rl``).
        """
        super().__init__(task=task)
        sizes = PRESETS[self.family]
        self.size = size or self.default_size
        if self.size not in sizes:
            raise HyperparameterError(f"'size' = {self.size!r} is not a {self.family} size; choose one of "
                                      f"{', '.join(sizes)}")
        if not 0.0 <= dropout < 1.0:
            raise HyperparameterError(f"'dropout' = {dropout} is out of range: use a value in [0, 1)")
        self.weights, self.dropout = weights, dropout
        self.folder_config = read_config(weights) if weights else None
        found = (self.folder_config or {}).get("model_type", self.family)
        if found != self.family and not self.any_folder:
            raise HyperparameterError(f"'weights' = {weights!r} is a {found} model, not {self.family}; use "
                                      f"{found}-<size> or llm-tiny with it")
        if lora_rank and not weights:
            raise HyperparameterError(f"'lora_rank' = {lora_rank} adapts a trained model, but 'weights' names none: "
                                      "give weights='/path/to/hf-folder' (a pretrained model, or one exported with "
                                      "format='hf'), or drop lora_rank to train every weight")
        set_lora = [f"'{name}' = {value!r}" if isinstance(value, str) else f"'{name}' = {value:g}"
                    for name, value, default in (
            ("lora_alpha", lora_alpha, None), ("lora_targets", lora_targets, LORA_ALL),
            ("lora_dropout", lora_dropout, 0.0)) if value != default]
        if not lora_rank and adapter is None and set_lora:
            raise HyperparameterError(f"{' and '.join(set_lora)} configure LoRA adapters, but lora_rank is 0 (every "
                                      "weight trains, no adapters): set lora_rank (e.g. 8) to train adapters, or "
                                      "drop them")
        if lora_alpha is not None and lora_alpha <= 0:
            raise HyperparameterError(f"'lora_alpha' = {lora_alpha} must be positive")
        if not 0.0 <= lora_dropout < 1.0:
            raise HyperparameterError(f"'lora_dropout' = {lora_dropout} is out of range: use a value in [0, 1)")
        targets = [t.strip() for t in lora_targets.split(",") if t.strip()]
        if not targets:
            raise HyperparameterError(f"'lora_targets' = {lora_targets!r} names no module; use '{LORA_ALL}' or "
                                      "names such as 'q_proj,v_proj'")
        if self.task == "preference_tuning" and not weights:
            raise HyperparameterError("task 'preference_tuning' tunes a trained model (the reference DPO compares "
                                      "with): give weights='/path/to/hf-folder' (an instruction-tuned model, or one "
                                      "exported with format='hf')")
        self.rl: RLSettings | None = None
        """How a ``reinforcement_learning`` run samples, scores and updates (``twinkle_llm.rl``)."""
        self._rollouts = RolloutBuffer(1)
        rl_given = [f"'{name}' = {value!r}" for name, value, default in (
            ("rewards", rewards, None), ("group_size", group_size, 8), ("max_new_tokens", max_new_tokens, 64),
            ("temperature", temperature, 1.0), ("kl_coef", kl_coef, 0.0), ("clip_low", clip_low, 0.2),
            ("clip_high", clip_high, 0.2), ("loss_normalisation", loss_normalisation, "token"),
            ("advantages", advantages, "grpo"), ("scale_rewards", scale_rewards, True),
            ("pass_threshold", pass_threshold, 1.0), ("updates_per_rollout", updates_per_rollout, 1),
            ("rollout_engine", rollout_engine, "local"))
            if value != default]
        if self.task == RL_TASK:
            self.rl = self._rl_settings(weights, rewards, group_size, max_new_tokens, temperature, kl_coef, clip_low,
                                        clip_high, loss_normalisation, advantages, scale_rewards, pass_threshold,
                                        updates_per_rollout, rollout_engine)
            self._rollouts = RolloutBuffer(updates_per_rollout)
        elif rl_given:
            raise HyperparameterError(f"{' and '.join(rl_given)} configure reinforcement learning, but the task is "
                                      f"'{self.task}': pass task='reinforcement_learning', or drop them")
        self.lora_rank, self.lora_dropout, self.beta = lora_rank, lora_dropout, beta
        self.val_generations, self.fused_loss = val_generations, fused_loss
        self._val_prompts: list[Prompt] = []
        self._reference: list[nn.Module] = []  # DPO's frozen reference without LoRA (not a submodule: not saved)
        self.lora_alpha = float(lora_alpha) if lora_alpha is not None else 2.0 * lora_rank
        if lora_rank and self.task != "preference_tuning":
            self.optim.lr = self.LORA_LR  # the default; a given lr replaces it (Algorithm.from_hyperparams)
        self.lora_targets = LORA_ALL if targets == [LORA_ALL] else targets
        self.adapter = adapter
        if adapter is not None:
            self._take_adapter(adapter, lora_rank, lora_alpha, targets)
        if quantize_base in ("nf4", "bnb-nf4") and not self.lora_rank:
            raise HyperparameterError(f"'quantize_base' = {quantize_base!r} stores the frozen base of a LoRA run, but "
                                      "lora_rank is 0 (every weight trains): set lora_rank (e.g. 8), or drop "
                                      "quantize_base")
        if quantize_base == "nf4":
            require_torchao()
        elif quantize_base == "bnb-nf4":
            require_bitsandbytes()
        self.quantize_base: str = quantize_base
        self.quantized_base: str = "none"
        """What the built model's base is stored in: ``nf4``, ``bnb-nf4`` or ``none`` (``quantize_base`` resolved)."""
        self._quantize_reason = ""
        self._tokenizer: TextTokenizer | None = None
        self._template: ChatTemplate | None = None
        self._val_sum: torch.Tensor | None = None
        self._test_sum = torch.zeros(5, dtype=torch.float64)
        self._split_logits = False  # the logits come split by vocabulary (tensor parallel with loss parallel)

    @staticmethod
    def _rl_settings(weights: str | None, rewards: Any, group_size: int, max_new_tokens: int, temperature: float,
                     kl_coef: float, clip_low: float, clip_high: float, loss_normalisation: str, advantages: str,
                     scale_rewards: bool, pass_threshold: float, updates_per_rollout: int = 1,
                     rollout_engine: str = "local") -> RLSettings:
        """``reinforcement_learning``'s settings, each checked.

        Raises:
            HyperparameterError: no weights or rewards, a group of one, a negative temperature or KL weight,
                clipping bounds out of range; RewardError and UnknownComponentError: rewards that cannot be built.
        """
        from twinkle_core.rewards import resolve_rewards

        if not weights:
            raise HyperparameterError("task 'reinforcement_learning' samples from a trained model: give weights="
                                      "'/path/to/hf-folder' (an instruction-tuned model, or one exported with "
                                      "format='hf')")
        if rewards is None:
            raise HyperparameterError("task 'reinforcement_learning' needs rewards= (twinkle rewards list), e.g. "
                                      "rewards='exact_answer' or {'exact_answer': 1.0, 'format': 0.2}")
        for name, value, low in (("group_size", group_size, 2), ("temperature", temperature, 0.0),
                                 ("kl_coef", kl_coef, 0.0), ("clip_low", clip_low, 0.0), ("clip_high", clip_high, 0.0)):
            if not value >= low:
                raise HyperparameterError(f"'{name}' = {value} must be at least {low:g}")
        if clip_low >= 1:
            raise HyperparameterError(f"'clip_low' = {clip_low}: the ratio's lower bound 1 - clip_low must stay above "
                                      "0; use a value below 1 (0.2 is usual)")
        return RLSettings(resolve_rewards(rewards), group_size, max_new_tokens, temperature, kl_coef, clip_low,
                          clip_high, loss_normalisation, advantages, scale_rewards, float(pass_threshold),
                          updates_per_rollout, make_engine(rollout_engine))

    def plan_decisions(self, plan: Any) -> list[Any]:
        """A LoRA run from a folder explains how its base is stored (``quantize_base``: the base's size against the
        device's memory); reinforcement learning explains its rollouts: completions sampled and scored per step and
        per optimizer step, their length, and the one update each rollout batch makes."""
        from twinkle_core.planning import Decision

        decisions = [Decision("quantize_base", self.quantized_base, self._quantize_reason)] \
            if self._quantize_reason else []
        if self.rl is None:
            return decisions

        rl, micro = self.rl, plan.micro_batch_size
        names = ", ".join(f"{w.name} × {w.weight:g}" for w in rl.rewards)
        return decisions + [Decision("rollouts", micro * rl.group_size,
                         f"each step samples {rl.group_size} completions (group_size) of each of its {micro} prompts: "
                         f"{micro * rl.group_size} completions of up to {rl.max_new_tokens} tokens (max_new_tokens) at "
                         f"temperature {rl.temperature:g}, scored by {names}; an optimizer step takes "
                         f"{plan.effective_batch_size} prompts ({plan.effective_batch_size * rl.group_size} "
                         + ("completions) and makes one update per rollout batch (the ratio is 1: the policy "
                            "gradient)" if rl.updates_per_rollout == 1 else
                            f"completions), each rollout batch trained on {rl.updates_per_rollout} times in a row "
                            "(updates_per_rollout; the ratio to the sampling policy clipped)")
                         + f", the loss averaged per {rl.loss_normalisation}"
                         + (f", with the KL term × {rl.kl_coef:g}" if rl.kl_coef else ", no KL term (kl_coef=0)"))]

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """The step; then reinforcement learning's rollout engine is told the policy's weights changed (before the
        next rollout is sampled)."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        if self.rl is not None:
            self.rl.engine.weights_updated(self)

    @property
    def rows_per_sample(self) -> int:
        """Reinforcement learning trains on ``group_size`` completions of each prompt; 1 for the other tasks."""
        return self.rl.group_size if self.rl is not None else 1

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """The planner's example: for reinforcement learning, ``batch_size`` prompts' groups of ``group_size``
        sequences, each the longest prompt and ``max_new_tokens`` completion tokens (what a step's loss runs on);
        otherwise the data's shape."""
        if self.rl is None or self.data_spec is None:
            return super().example_input(batch_size)
        length = int(self.data_spec.input_shape[0]) + self.rl.max_new_tokens
        return torch.randint(0, self.data_spec.vocab_size or 2, (batch_size * self.rl.group_size, length))

    @property
    def updates_per_batch(self) -> int:
        """Reinforcement learning's ``updates_per_rollout``; 1 for the other tasks."""
        return self.rl.updates_per_rollout if self.rl is not None else 1

    def rank_state(self) -> Any:
        """The rollouts still to be trained on (``updates_per_rollout`` above 1), for an exact resume."""
        return self._rollouts.state() if self._rollouts.updates > 1 else None

    def load_rank_state(self, state: Any) -> None:
        """Take back the rollouts ``rank_state`` saved."""
        self._rollouts.load(state, self.device)

    @property
    def min_optimizer_steps(self) -> int | None:
        """Instruction tuning trains at least ``INSTRUCTION_STEPS`` steps by default (small chat sets learn a
        mapping through adapters slowly); other tasks: the planner's rule."""
        return self.INSTRUCTION_STEPS if self.task == "instruction_tuning" else None

    # ------------------------------------------------------------------ the model
    def model_input(self) -> ModelInput:
        """The tokenizer the data must be encoded with (the folder's when starting from one) and the longest
        sequence the model takes (its ``max_position_embeddings``)."""
        config = self.folder_config or PRESETS[self.family][self.size]
        longest = config.get("max_position_embeddings")
        return ModelInput(name=self.weights or f"{self.family}-{self.size}", tokenizer=self.weights,
                          max_length=int(longest) if longest else None)

    def build_model(self, spec: DataSpec) -> nn.Module:
        """The network: the folder's weights, or the preset's shape with the data's vocabulary, random init."""
        from transformers import AutoModelForCausalLM

        if spec.vocab_size is None:
            raise TwinkleError(f"{type(self).__name__} needs token ids with a vocabulary; got a {spec.task} spec")
        if self.folder_config is not None:
            model = self._load_base()
            if model.config.vocab_size < spec.vocab_size:
                raise TwinkleError(f"the tokenizer has {spec.vocab_size} ids but '{self.weights}' embeds "
                                   f"{model.config.vocab_size}")
            keeps_reference = self.task == "preference_tuning" or (self.rl is not None and self.rl.kl_coef > 0)
            if keeps_reference and not self.lora_rank:
                self._reference = [copy.deepcopy(model).eval().requires_grad_(False)]
            return self.with_adapters(model) if self.lora_rank else model
        settings = {**PRESETS[self.family][self.size], "vocab_size": spec.vocab_size,
                    "eos_token_id": spec.extra.get("eos_id"), "pad_token_id": spec.extra.get("pad_id"),
                    "bos_token_id": None, "attention_dropout": self.dropout}
        return AutoModelForCausalLM.from_config(build_config(self.family, settings), dtype=torch.float32)

    def _load_base(self) -> nn.Module:
        """The ``weights`` folder's model in fp32; a LoRA run's base stored as ``quantize_base`` resolves
        (``twinkle_llm.quantized.choose``: the value and its reason go into the plan)."""
        from twinkle_core.planning import Hardware

        from twinkle_llm import quantized

        folder = str(self.weights)
        if not self.lora_rank:
            return load_folder_model(folder, dtype=torch.float32, attention_dropout=self.dropout)
        memory = Hardware.detect().device_memory_bytes
        self.quantized_base, self._quantize_reason = quantized.choose(self.quantize_base,
                                                                      quantized.folder_parameters(folder), memory)
        if self.quantized_base == "nf4":
            model, done = quantized.load_nf4(folder, attention_dropout=self.dropout)
            self._quantize_reason += (f"; {done.layers} linear layers in NF4: {done.nf4_bytes:,} bytes for "
                                      f"{done.full_bytes:,} in bf16 ({done.nf4_bytes / done.full_bytes:.2f})")
            if done.kept:
                self._quantize_reason += f", {len(done.kept)} kept in full precision (not whole 64-value blocks)"
            return model
        if self.quantized_base == "bnb-nf4":
            quantized.require_bitsandbytes()
            return load_folder_model(folder, dtype=torch.bfloat16, attention_dropout=self.dropout,
                                     **quantized.bnb_options())
        return load_folder_model(folder, dtype=torch.float32, attention_dropout=self.dropout)

    def _take_adapter(self, adapter: str, rank: int, alpha: float | None, targets: list[str]) -> None:
        """The rank, scale and layers of the adapter folder ``adapter`` (those given must agree with it)."""
        if not self.weights:
            raise HyperparameterError(f"'adapter' = {adapter!r} adapts a base model, but 'weights' names none: give "
                                      "weights='/path/to/hf-folder', the base the adapter was trained on")
        config = read_adapter(adapter)[1]
        found = config.get("target_modules")
        found = sorted(found) if isinstance(found, (list, tuple)) else found
        own = {"lora_rank": int(config.get("r") or 0), "lora_alpha": float(config.get("lora_alpha") or 0.0),
               "lora_targets": found}
        given = {"lora_rank": rank or None, "lora_alpha": alpha,
                 "lora_targets": None if targets == [LORA_ALL] else sorted(targets)}
        for name, value in given.items():
            if value is not None and value != own[name]:
                raise HyperparameterError(f"'{name}' = {value!r} but adapter '{adapter}' has {own[name]!r}; drop "
                                          f"'{name}' (the adapter's is used) or start from fresh adapters")
        if own["lora_rank"] < 1 or not found:
            raise HyperparameterError(f"adapter '{adapter}': its adapter_config.json names no rank or layers")
        self.lora_rank, self.lora_alpha, self.lora_targets = own["lora_rank"], own["lora_alpha"], found

    def with_adapters(self, model: nn.Module) -> nn.Module:
        """``model`` frozen, with peft's LoRA adapters on ``lora_targets`` (the only weights that train): fresh ones,
        or ``adapter``'s weights.

        Raises:
            HyperparameterError: the targets do not fit the network; TwinkleError: ``adapter`` was trained on
                another base (names or shapes differ).
        """
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=self.lora_rank, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                            target_modules=self.lora_targets, task_type="CAUSAL_LM")
        try:
            adapted = get_peft_model(model, config)
        except ValueError as err:  # a target module the network does not have
            named = self.lora_targets if isinstance(self.lora_targets, str) else ",".join(self.lora_targets)
            raise HyperparameterError(f"'lora_targets' = {named!r} does not fit {type(model).__name__}: {err}") from err
        if self.adapter is not None:
            self._load_adapter(adapted)
        return adapted

    def _load_adapter(self, adapted: nn.Module) -> None:
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors.torch import load_file

        folder = read_adapter(str(self.adapter))[0]
        state = load_file(str(folder / "adapter_model.safetensors"))
        expected = get_peft_model_state_dict(adapted, save_embedding_layers=False)
        differ = sorted(set(state) ^ set(expected))
        differ += [k for k in sorted(set(state) & set(expected)) if state[k].shape != expected[k].shape]
        if differ:
            raise TwinkleError(f"adapter '{self.adapter}' does not fit the base '{self.weights}': "
                               f"{len(differ)} weights differ in name or shape, first {', '.join(differ[:3])}; "
                               "give the base folder it was trained on")
        set_peft_model_state_dict(adapted, state)

    def tensor_parallel_plan(self, mesh: Any) -> dict[str, Any]:
        """The Llama plan (``twinkle_llm.parallel``): attention and MLP split by heads and width, sequence-parallel
        norms, the vocabulary split in the embedding and ``lm_head``.

        Raises:
            HyperparameterError: the size does not divide the heads, MLP width or vocabulary, or the run trains
                LoRA adapters (not split yet).
        """
        from twinkle_llm.parallel import llama_plan

        if self.adapted:
            raise HyperparameterError("tensor_parallel_size > 1 with LoRA adapters is not supported yet: drop "
                                      "tensor_parallel_size (LoRA's base is frozen, so FSDP2 or DDP suffice) or lora_rank")
        whole = self.device_mesh  # None while planning (the planner reads the plan's module names)
        names = (whole.mesh_dim_names or ()) if whole is not None else ()
        staged = "pipeline_parallel" in names and whole["pipeline_parallel"].size() > 1
        split = not staged  # pipeline stages hand plain tensors on: the last one gathers its logits
        if whole is not None:  # the engine's call (the planner's only reads the plan)
            self._split_logits = split
        return llama_plan(self.model.config, mesh.size(), split_logits=split)

    def pipeline_stages(self, stages: int) -> list[nn.Module]:
        """Runs of decoder layers (``twinkle_llm.parallel.decoder_stages``): the embedding with the first, the
        final norm and ``lm_head`` with the last.

        Raises:
            HyperparameterError: the run trains LoRA adapters or DPO (not cut into stages yet).
            TwinkleError: fewer decoder layers than stages.
        """
        from twinkle_llm.parallel import decoder_stages

        if self.adapted or self.task == "preference_tuning":
            raise HyperparameterError("pipeline_parallel_size > 1 is not supported yet for LoRA adapters or "
                                      "preference_tuning: drop pipeline_parallel_size (FSDP2 shards the model instead)")
        return list(decoder_stages(self.model, stages))

    def pipeline_batch(self, batch: Any) -> tuple[tuple[torch.Tensor, ...], torch.Tensor, Any]:
        """Token ids and position ids in, labels as targets; a micro-batch's loss is its summed token
        cross-entropy over the whole batch's predicted tokens (so the micro-batches add up to the batch's mean)."""
        x, labels = batch[0], batch[1]
        positions = _positions(x, batch[2] if len(batch) > 2 else None)
        count = (labels[:, 1:] != -100).sum().clamp(min=1)
        return (x, positions), labels, lambda logits, targets: self._summed_loss(logits, targets) / count

    def configure_model(self) -> None:
        """Lay the model out (``Algorithm.configure_model``). Split over a tensor-parallel group or cut into
        pipeline stages, it writes no held-out generations: decoding one token at a time leaves nothing to split by
        sequence, nor to fill a pipeline with (said once)."""
        super().configure_model()
        if (self._split_logits or self.pipeline is not None) and self.val_generations and self.trainer.is_global_zero:
            import warnings

            warnings.warn(f"val_generations={self.val_generations}: held-out generations are not written under "
                          "tensor or pipeline parallel yet (decoding one token at a time cannot split by sequence or "
                          "fill a pipeline); generate from the finished run instead (Trainer.generate, twinkle llm "
                          "generate)", stacklevel=2)

    def shard_units(self) -> list[nn.Module]:
        """FSDP2's units: each decoder layer (as torchtitan shards Llama); the embedding, final norm and head
        (one tensor where tied) go with the whole model."""
        layers = getattr(getattr(self.model, "model", None), "layers", None)
        return list(layers) if layers is not None else super().shard_units()

    @property
    def adapted(self) -> bool:
        """Whether only LoRA adapters train (the base is frozen, and left out of checkpoints)."""
        return bool(self.lora_rank)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The module's state; with LoRA only the adapters' (the base is ``weights``, named in the run)."""
        state = super().state_dict(*args, **kwargs)
        if not self.adapted or args:
            return state
        prefix = kwargs.get("prefix", "")
        trainable = {prefix + name for name, p in self.named_parameters() if p.requires_grad}
        return type(state)((k, v) for k, v in state.items() if k in trainable)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Load a state; with LoRA an adapters-only state completes the base loaded from ``weights``.

        Raises:
            RuntimeError: with ``strict``, a name the model lacks, or a trainable weight the state lacks.
        """
        if not self.adapted:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        result = super().load_state_dict(state_dict, strict=False, assign=assign)
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        missing = [k for k in result.missing_keys if k in trainable]
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"the adapters' state does not fit {type(self).__name__}: missing {missing[:4]}, "
                               f"unexpected {result.unexpected_keys[:4]}")
        return result

    def enable_gradient_checkpointing(self) -> None:
        """transformers' activation checkpointing of every decoder layer."""
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.config.use_cache = False

    @property
    def tokenizer(self) -> TextTokenizer:
        """The tokenizer the run's data was encoded with (stored in its data spec)."""
        if self._tokenizer is None:
            if self.data_spec is None or not self.data_spec.extra.get("tokenizer"):
                raise TwinkleError(f"{type(self).__name__} has seen no data yet: train it or load a run first")
            self._tokenizer = TextTokenizer.resolve(str(self.data_spec.extra["tokenizer"]))
        return self._tokenizer

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The next-token logits ``[B, L, vocab]`` of token ids ``x`` (``position_ids`` mark packed documents);
        preference pairs ``[B, 2, L]`` give ``[B, 2, L, vocab]`` (the planner measures a pair as one sample)."""
        if x.dim() == 3:
            return self(x.flatten(0, 1)).unflatten(0, x.shape[:2])
        logits = self._logits(x, position_ids)
        return logits.full_tensor() if _is_dtensor(logits) else logits  # split by vocabulary (loss parallel)

    def _logits(self, x: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The network's logits as it returns them: split by vocabulary under tensor parallel (a ``DTensor``);
        through every stage, whole, when pipelined."""
        if self.pipeline is not None:
            return self.pipeline.forward(x, _positions(x, position_ids))
        return self.model(input_ids=x, position_ids=position_ids, use_cache=False).logits

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Lightning's backward — inside ``loss_parallel`` when the logits are split by vocabulary, as its
        cross-entropy's backward must be."""
        with _loss_parallel() if self._split_logits else contextlib.nullcontext():
            super().backward(loss, *args, **kwargs)

    # ------------------------------------------------------------- loss and metrics
    def _token_loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed next-token cross-entropy of a batch and the number of predicted tokens (through the fused,
        chunked head where it applies: ``fused_loss``)."""
        x, labels, positions = batch[0], batch[1], batch[2] if len(batch) > 2 else None
        count = (labels[:, 1:] != -100).sum()
        head = self.fused_head()
        if head is None:
            return self._summed_loss(self._logits(x, positions), labels), count
        from twinkle_llm.fused_loss import fused_linear_cross_entropy

        hidden = self.model.get_decoder()(input_ids=x, position_ids=positions, use_cache=False).last_hidden_state
        return fused_linear_cross_entropy(hidden[:, :-1].reshape(-1, hidden.size(-1)), head,
                                          labels[:, 1:].reshape(-1)), count

    def fused_head(self) -> nn.Linear | None:
        """The LM head the fused loss goes through, or ``None`` where the logits path must be used: ``fused_loss``
        off, logits split by vocabulary or pipelined, parameters sharded (FSDP2's or DeepSpeed's: the head's weight
        is whole only inside the root module's forward), a head that is not a plain ``nn.Linear`` (LoRA on it), or
        a model that scales or soft-caps its logits."""
        if not self.fused_loss or self._split_logits or self.pipeline is not None or getattr(self, "model", None) is None:
            return None
        head = self.model.get_output_embeddings()
        if type(getattr(head, "weight", None)) is not nn.Parameter or hasattr(head.weight, "ds_id"):
            return None  # a DTensor (FSDP2, tensor parallel) or a ZeRO-3 partition
        config = getattr(self.model, "config", None)
        scaled = any(getattr(config, name, None) not in (None, 1.0, 1)
                     for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"))
        return head if type(head) is nn.Linear and not scaled else None

    def _summed_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The next-token cross-entropy of ``logits`` against ``labels``, summed over the labelled tokens (on
        logits split by vocabulary, inside ``loss_parallel``)."""
        targets = labels[:, 1:]
        flat, split = targets.reshape(-1), _is_dtensor(logits)
        if split:  # each rank's vocabulary shard (loss parallel); the targets, replicated, pick across them
            from torch.distributed.tensor import DTensor, Replicate

            flat = DTensor.from_local(flat, logits.device_mesh, [Replicate()], run_check=False)
        with _loss_parallel() if split else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), flat,
                                               ignore_index=-100, reduction="sum")
        return loss.full_tensor() if split else loss

    def reference_logits(self, ids: torch.Tensor, **inputs: Any) -> torch.Tensor:
        """The reference model's logits of ``ids`` (DPO's; GRPO's KL term): the base without its adapters (LoRA),
        or the frozen copy of the starting model (no gradients). ``inputs``: the model's other inputs
        (``attention_mask``, ``position_ids``)."""
        with torch.no_grad():
            if self.adapted:
                with self.model.disable_adapter():
                    return self.model(input_ids=ids, use_cache=False, **inputs).logits
            if not self._reference:
                raise TwinkleError(f"{type(self).__name__} has no reference model: LoRA runs, preference_tuning and "
                                   "reinforcement_learning with kl_coef keep one")
            reference = self._reference[0].to(self.device)
            return reference(input_ids=ids, use_cache=False, **inputs).logits

    def preference_terms(self, batch: Any) -> Any:
        """DPO's loss, rewards and log-likelihoods of a batch of pairs (``twinkle_llm.preference``)."""
        from twinkle_llm.preference import dpo_terms, sequence_logps

        ids, labels = batch[0].flatten(0, 1), batch[1].flatten(0, 1)  # chosen, rejected, chosen, ...
        policy = sequence_logps(self(ids), labels).view(-1, 2)
        reference = sequence_logps(self.reference_logits(ids), labels).view(-1, 2)
        return dpo_terms(policy, reference, self.beta)

    def batch_loss(self, batch: Any) -> torch.Tensor:
        """The mean cross-entropy per predicted token; for ``preference_tuning`` DPO's loss per pair (the reward
        margin and preference accuracy are logged beside it)."""
        if self.rl is not None:
            loss, figures = rl_loss(self, self.rl, batch, self._rollouts)
            self.log_dict(figures, on_step=True, on_epoch=True, batch_size=len(batch[0]))
            return loss
        if self.task == "preference_tuning":
            terms = self.preference_terms(batch)
            self.log_dict({"train_reward_margin": terms.margin.mean(),
                           "train_preference_accuracy": (terms.margin > 0).float().mean()},
                          on_step=True, on_epoch=True, batch_size=len(terms.loss))
            return terms.loss.mean()
        total, count = self._token_loss(batch)
        return total / count.clamp(min=1)

    def agreement_loss(self, batch: Any) -> torch.Tensor | None:
        """For reinforcement learning, the prompts' own next-token loss (left padding left out): what the speed
        probe compares between precisions, as the policy loss depends on the completions sampled (core's
        ``Algorithm.agreement_loss``); ``None`` for the other tasks (their training loss is compared)."""
        if self.rl is None:
            return None
        ids, mask = batch[0], batch[1]
        labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
        total, count = self._token_loss((ids, labels, (mask.cumsum(1) - 1).clamp(min=0)))
        return total / count.clamp(min=1)

    def on_validation_epoch_start(self) -> None:
        """Start the sums (token-weighted; per pair for DPO; per prompt for reinforcement learning)."""
        self._val_sum = torch.zeros(self._sum_size, dtype=torch.float64, device=self.device)

    @property
    def _sum_size(self) -> int:
        """How many figures ``_sums`` adds up: 5, or reinforcement learning's 4 and one per reward."""
        return 4 + len(self.rl.rewards) if self.rl is not None else 5

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Add the batch's summed loss and its count (tokens; pairs, with rewards and likelihoods, for DPO)."""
        if self._val_sum is None:
            self.on_validation_epoch_start()
        self._val_sum += self._sums(batch)
        if batch_idx == 0 and self.val_generations and self.rl is None:
            self._val_prompts = held_out_prompts(batch, self.task, self.val_generations, GENERATED_TOKENS)

    def on_validation_epoch_end(self) -> None:
        """Log ``val_loss`` (per token, or per pair for DPO, over every rank's batches) and ``val_perplexity``;
        for DPO ``val_preference_accuracy`` (the chosen answer's reward above the rejected's),
        ``val_reward_margin`` and ``val_likelihood_accuracy`` (the policy finds the chosen answer likelier)."""
        self.log_dict(self._figures(self._val_sum, "val"), prog_bar=True, sync_dist=False)
        self._val_sum = None
        if self.val_generations and not self.trainer.sanity_checking and not self._split_logits:
            self.write_generations(self._val_prompts)
        self._val_prompts = []

    def on_test_epoch_start(self) -> None:
        """Start the test sums (``evaluate``), as validation's."""
        self._test_sum = torch.zeros(self._sum_size, dtype=torch.float64, device=self.device)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """Add the batch's sums, as ``validation_step`` does (reinforcement learning: with pass@k)."""
        self._test_sum += rl_sums(self, self.rl, batch, pass_at_k=True) if self.rl is not None else self._sums(batch)

    def on_test_epoch_end(self) -> None:
        """Log ``test_loss`` and ``test_perplexity`` (DPO, reinforcement learning: their test figures), computed
        as validation's."""
        self.log_dict(self._figures(self._test_sum, "test"), sync_dist=False)

    @property
    def evaluation_needs_outputs(self) -> bool:
        """A language model's report is its test figures (per-token loss, perplexity): no logits are gathered."""
        return False

    def evaluation_report(self, outputs: torch.Tensor, targets: torch.Tensor, spec: Any) -> Any:
        """Nothing beyond the test figures (``loss``, ``perplexity``; DPO's accuracies and margin; reinforcement
        learning's ``reward``, each reward's mean and ``pass_at_<k>``)."""
        from twinkle_core import EvaluationReport

        return EvaluationReport()

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """``predict`` of prompts (a batch of texts): the text the model writes after each (greedy,
        ``GENERATED_TOKENS`` tokens); a batch of token ids: the logits, as any algorithm's."""
        prompts = batch[0] if isinstance(batch, (tuple, list)) else batch
        if isinstance(prompts, (tuple, list)) and all(isinstance(p, str) for p in prompts):
            return [self.generate(p, max_new_tokens=GENERATED_TOKENS) for p in prompts]
        return super().predict_step(batch, batch_idx)

    def prediction_rows(self, outputs: Any, spec: Any) -> list[dict[str, Any]]:
        """One row per prompt: the ``text`` the model wrote after it."""
        return [{"text": text} for text in outputs]

    def _sums(self, batch: Any) -> torch.Tensor:
        """A batch's summed loss and its count (tokens; pairs, with rewards and likelihoods, for DPO; for
        reinforcement learning the greedy answers' rewards: ``rl_sums``)."""
        if self.rl is not None:
            return rl_sums(self, self.rl, batch)
        if self.task == "preference_tuning":
            terms = self.preference_terms(batch)
            parts = [terms.loss.sum(), torch.tensor(len(terms.loss)), (terms.margin > 0).sum(), terms.margin.sum(),
                     (terms.chosen_logp > terms.rejected_logp).sum()]
        else:
            total, count = self._token_loss(batch)
            parts = [total, count, torch.tensor(0), torch.tensor(0), torch.tensor(0)]
        return torch.stack([p.detach().double().to(self.device) for p in parts])

    def _figures(self, sums: torch.Tensor | None, prefix: str) -> dict[str, float]:
        """The figures of summed batches (over every rank's), named ``<prefix>_loss`` and so on."""
        sums = sums if sums is not None else torch.zeros(self._sum_size, dtype=torch.float64)
        if self.trainer.world_size > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        if self.rl is not None:
            return rl_figures(self.rl, sums, prefix)
        count = float(sums[1].clamp(min=1))
        loss = float(sums[0]) / count
        figures = {f"{prefix}_loss": loss}
        if self.task == "preference_tuning":
            figures.update({f"{prefix}_preference_accuracy": float(sums[2]) / count,
                            f"{prefix}_reward_margin": float(sums[3]) / count,
                            f"{prefix}_likelihood_accuracy": float(sums[4]) / count})
        else:
            figures[f"{prefix}_perplexity"] = math.exp(min(loss, 50.0))
        return figures

    def eval_batch_size(self, micro_batch_size: int) -> int:
        """Validation windows per batch: the training micro-batch (logits of a window are ``L × vocab``)."""
        return micro_batch_size

    # ---------------------------------------------------------------------- export
    def export_module(self) -> nn.Module:
        """The network with the tokenizer and chat template (``twinkle_llm.exporting``); forward: ids → logits.
        A QLoRA run's NF4 base comes dequantized (a copy: the values its layers compute with)."""
        from twinkle_llm.exporting import LanguageModelExport
        from twinkle_llm.quantized import dequantized

        return LanguageModelExport(dequantized(self.model), self.tokenizer, self.chat_template,
                                   quantized_base=self.quantized_base)

    def export_inputs(self, batch: Any) -> dict[str, torch.Tensor]:
        """The token ids of a validation batch as the input ``input_ids`` (a preference batch's answers one after
        another); an ONNX graph takes any batch and length."""
        return {"input_ids": batch[0].flatten(0, 1) if batch[0].dim() == 3 else batch[0]}

    def export_metrics(self, outputs: torch.Tensor, batch: Any) -> dict[str, torch.Tensor]:
        """The share of labelled next tokens an exported model's logits rank first (``token_accuracy``; a
        reinforcement-learning run's prompts: their own tokens, padding left out)."""
        if self.rl is not None:  # (ids, attention mask, rows): the prompt's tokens are the labels
            labels = torch.where(batch[1].bool(), batch[0], torch.full_like(batch[0], -100))
        else:
            labels = batch[1].flatten(0, 1) if batch[1].dim() == 3 else batch[1]
        targets = labels[:, 1:]
        mask = targets != -100
        hits = (outputs[:, :-1].argmax(-1) == targets) & mask
        return {"token_accuracy": hits.sum() / mask.sum().clamp(min=1)}

    # ------------------------------------------------------------------ generation
    @property
    def chat_template(self) -> ChatTemplate:
        """The chat template the run's conversations were rendered with (the default one for raw-text runs)."""
        if self._template is None:
            source = str((self.data_spec.extra if self.data_spec else {}).get("chat_template", DEFAULT_TEMPLATE))
            folder = None if source == DEFAULT_TEMPLATE else source
            self._template = ChatTemplate.for_folder(folder, self.tokenizer.eos_text)
        return self._template

    @torch.no_grad()
    def log_likelihood(self, prompt: str | Messages, answer: str, reference: bool = False) -> float:
        """The model's log-probability of ``answer`` after ``prompt``: raw text continued by ``answer``, or a
        conversation (ending with the user's turn) answered by the assistant with ``answer`` and the token that
        ends its turn, rendered with the run's chat template. With ``reference``, DPO's reference model's (a
        ``preference_tuning`` run's implicit reward of an answer is ``beta`` × the difference of the two).

        Raises:
            DataError: a malformed conversation.
        """
        from twinkle_llm.preference import sequence_logps

        if isinstance(prompt, str):
            text, span = prompt + answer, (len(prompt), len(prompt) + len(answer))
        else:
            turns = [*check_messages(prompt, "the prompt", complete=False), {"role": "assistant", "content": answer}]
            text, spans = self.chat_template.with_spans(turns, "the prompt")
            span = spans[-1]
        ids, offsets = self.tokenizer.encode_offsets(text)
        labels = [token if span[0] <= begin < span[1] else -100 for token, (begin, _) in zip(ids, offsets)]
        was_training = self.model.training
        self.model.eval()
        try:
            tensor = torch.tensor([ids], device=self.device)
            logits = self.reference_logits(tensor) if reference else self(tensor)
        finally:
            self.model.train(was_training)
        return float(sequence_logps(logits, torch.tensor([labels], device=self.device))[0])

    @torch.no_grad()
    def generate(self, prompt: str | Messages, max_new_tokens: int = 64, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int = 0) -> str:
        """The text the model writes after ``prompt`` (KV cache; stops at the end-of-text token).

        ``prompt`` is raw text to continue, or a conversation (``[{"role": "user", "content": ...}]``, ending
        with the user's turn) rendered with the run's chat template; the answer is the assistant's turn.
        ``temperature`` 0 is greedy; otherwise nucleus sampling with ``top_p``, reproducible for a ``seed``.

        Raises:
            HyperparameterError: ``max_new_tokens`` below 1; DataError: a malformed conversation.
        """
        if max_new_tokens < 1:
            raise HyperparameterError(f"max_new_tokens = {max_new_tokens}: give at least 1")
        tokenizer = self.tokenizer
        if not isinstance(prompt, str):
            prompt = self.chat_template.render(check_messages(prompt, "the prompt", complete=False),
                                               add_generation_prompt=True)
        ids = tokenizer.encode(prompt) or [tokenizer.eos_id]
        return tokenizer.decode(self.continue_ids(ids, max_new_tokens, temperature, top_p, seed))

    @torch.no_grad()
    def continue_ids(self, ids: list[int], max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
                     seed: int = 0, synced: bool = False) -> list[int]:
        """The token ids the model writes after ``ids`` (transformers' ``generate`` with its KV cache), up to
        ``max_new_tokens`` or a stop token. ``synced``: every rank of a job calls this together (a sharded model's
        layers gather their weights collectively; transformers' ``synced_gpus``)."""
        tokenizer = self.tokenizer
        tensor = torch.tensor([ids], device=self.device)
        sample = temperature > 0
        options: dict[str, Any] = {"do_sample": sample, "max_new_tokens": max_new_tokens,
                                   "eos_token_id": list(tokenizer.stop_ids), "pad_token_id": tokenizer.pad_id,
                                   "synced_gpus": synced}
        if sample:
            options.update(temperature=temperature, top_p=top_p)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                out = self.model.generate(input_ids=tensor, attention_mask=torch.ones_like(tensor), **options)
        finally:
            self.model.train(was_training)
        return out[0, len(ids):].tolist()

    def write_generations(self, prompts: list[Prompt]) -> str | None:
        """Answer held-out ``prompts`` greedily and write them, with the data's own continuation, to
        ``generations/step-<global step>.jsonl`` in the run (global rank zero writes; every rank generates the
        rank-zero prompts together, so a sharded model stays in step)."""
        import json

        if self.trainer.world_size > 1:
            prompts = self.trainer.strategy.broadcast(prompts, src=0)
        if not prompts:
            return None
        decode, stops = self.tokenizer.decode, set(self.tokenizer.stop_ids)
        lines = []
        for prompt in prompts:
            written = self.continue_ids(prompt.ids, GENERATED_TOKENS, synced=self.trainer.world_size > 1)
            ends = [i for i, token in enumerate(prompt.reference) if token in stops]
            reference = prompt.reference[:ends[0]] if ends else prompt.reference  # the answer, up to its turn's end
            lines.append(json.dumps({"epoch": self.current_epoch, "step": self.global_step,
                                     "prompt": decode(prompt.ids), "generated": decode(written),
                                     "reference": decode(reference)}, ensure_ascii=False))
        return self.write_to_run(f"generations/step-{self.global_step:07d}.jsonl", "\n".join(lines) + "\n")


class LlmTiny(CausalLM):
    """``llm-tiny``: a Llama of about 0.7M parameters (plus its embeddings) that trains in CPU minutes."""

    family = "llama"
    default_size = "tiny"
    any_folder = True


class Llama(CausalLM):
    """``llama-<size>``: Llama shapes (``tiny``, ``60m``; Llama 3.2 ``1b``/``3b``, 3.1 ``8b``/``70b``;
    Llama 2 ``13b``)."""

    family = "llama"
    default_size = "tiny"


class Qwen2(CausalLM):
    """``qwen2-<size>``: Qwen2.5 shapes (``0.5b``, ``1.5b``, ``7b``)."""

    family = "qwen2"
    default_size = "0.5b"


class Qwen3(CausalLM):
    """``qwen3-<size>``: Qwen3 shapes (``0.6b``, ``1.7b``, ``4b``, ``8b``)."""

    family = "qwen3"
    default_size = "0.6b"


def _positions(x: torch.Tensor, given: torch.Tensor | None) -> torch.Tensor:
    """The position ids of token ids ``x``: ``given`` (packed documents), else ``0 … L-1`` in every row (pipeline
    stages hand them on as a tensor)."""
    return given if given is not None else torch.arange(x.shape[1], device=x.device).expand_as(x)


def _is_dtensor(value: Any) -> bool:
    """Whether ``value`` is a ``DTensor`` (split over a device mesh)."""
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _loss_parallel() -> Any:
    """torch's ``loss_parallel`` context: cross-entropy (and its backward) over logits split by vocabulary."""
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()

