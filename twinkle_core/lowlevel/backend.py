"""``TrainingBackend``: what a plugin implements so that ``twinkle serve --tinker`` can train and sample its models
step by step, driven by a client's own loop (the Tinker protocol: ``forward_backward``, ``optim_step``,
``sample``, ``save_state``).

A backend holds one copy of each base model it serves and, beside it, every training model's adapters and
optimizer state, keyed by the model id the service gives it. The service calls a backend from one thread at a
time and in each model's submission order; a backend never sees the protocol (ids, futures, users, wire types),
only the values below. The loss functions are core's (``twinkle_core.lowlevel.losses``): a backend computes
each datum's log-probabilities of its target tokens and hands them to the loss.

```python
from twinkle_core import hookimpl

@hookimpl
def register_training_backends(register):
    register("llm", "twinkle_llm.tinker:LoraBackend", description="LoRA on twinkle-llm's models")
```
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from twinkle_core.errors import TwinkleError


@dataclass(frozen=True)
class BaseModel:
    """A base model a backend serves.

    Attributes:
        name: what clients ask for (``create_lora_training_client(base_model=name)``).
        max_context_length: the longest sequence it takes.
        tokenizer: a local tokenizer folder or file clients may load (never a hub id), or ``None``.
    """

    name: str
    max_context_length: int | None = None
    tokenizer: str | None = None


@dataclass(frozen=True)
class LoraSettings:
    """The adapters of a training model: their ``rank``, which layers they adapt (``train_attn``: attention
    projections, ``train_mlp``: the feed-forward layers, ``train_unembed``: the output head) and the ``seed``
    of their initialisation."""

    rank: int = 32
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True
    seed: int | None = None


@dataclass(frozen=True)
class AdamSettings:
    """One optimizer step's Adam settings: decoupled ``weight_decay`` (AdamW), gradient clipping at
    ``grad_clip_norm`` (0: none)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@dataclass(frozen=True)
class SampleSettings:
    """How to sample: at most ``max_tokens`` new tokens at ``temperature`` (0: greedy), nucleus ``top_p``,
    ``top_k`` (-1: no limit), ``seed`` (``None``: unseeded); ``stop``: token ids or strings that end a sequence
    (``None``: the tokenizer's end of text; ``[]``: nothing stops it but ``max_tokens``)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: list[int] | list[str] | None = None


@dataclass
class Datum:
    """One training example: the input ``tokens`` and the loss's per-token ``inputs`` (``target_tokens``, int64
    ``[N]`` with ``N == len(tokens)``: the token each position predicts; ``weights``, ``logprobs``,
    ``advantages``: float32 ``[N]``)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardResult:
    """What a forward (and backward) pass gives back: per datum ``logprobs`` of its target tokens and the loss's
    ``elementwise_loss`` (float32 ``[N]``), and the batch's ``metrics`` (``"loss:sum"``, ...: name and reduction)."""

    outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]


@dataclass
class ForwardRequest:
    """One ``forward_backward`` of a batch the service hands a backend at once (``forward_backward_many``):
    the model, its data, the loss and its settings, and whether to accumulate gradients."""

    model_id: str
    data: list[Datum]
    loss: Any
    settings: dict[str, Any] = field(default_factory=dict)
    backward: bool = True


@dataclass
class Sequence:
    """A sampled continuation: its ``tokens``, their ``logprobs`` and why it ended (``stop``: a stop token or
    string; ``length``: ``max_tokens``); with ``ScoresWanted.sampled_top``, ``top``: at each sampled position the
    likeliest tokens and their log-probabilities, likeliest first."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: Literal["stop", "length"]
    top: list[list[tuple[int, float]]] | None = None


@dataclass(frozen=True)
class ScoresWanted:
    """What ``TrainingBackend.sample`` reports beside each sampled token's log-probability (the Tinker SDK's
    ``include_prompt_logprobs``, ``topk_prompt_logprobs``, ``topk_sample_logprobs`` and ``prompt_logprobs_last_n``).

    Attributes:
        prompt: each prompt token's log-probability given the tokens before it.
        prompt_top: at each prompt position, this many likeliest tokens with their log-probabilities (0: none).
        sampled_top: the same at each sampled position (0: none).
        last_n: only the prompt's last ``last_n`` positions are scored (``None``: every one but the first).
    """

    prompt: bool = False
    prompt_top: int = 0
    sampled_top: int = 0
    last_n: int | None = None

    def check(self, prompt_length: int) -> None:
        """Refuse what a prompt of ``prompt_length`` tokens cannot give.

        Raises:
            TwinkleError: a negative count; ``last_n`` without prompt scores, or outside 1 … length - 1.
        """
        for name, value in (("topk_prompt_logprobs", self.prompt_top), ("topk_sample_logprobs", self.sampled_top)):
            if value < 0:
                raise TwinkleError(f"{name}={value}: give 0 (none) or a positive count")
        if self.last_n is not None:
            if not (self.prompt or self.prompt_top):
                raise TwinkleError(f"prompt_logprobs_last_n={self.last_n} limits prompt scores, and none were asked "
                                   "for: set include_prompt_logprobs (or topk_prompt_logprobs)")
            if not 1 <= self.last_n <= prompt_length - 1:
                raise TwinkleError(f"prompt_logprobs_last_n={self.last_n} is outside 1 … {prompt_length - 1} (the "
                                   f"prompt has {prompt_length} tokens; the first has no score)")


@dataclass
class PromptScores:
    """A prompt's scores (``ScoresWanted``), one entry per prompt token: ``logprobs`` (``nan`` where none: the first
    token, those before ``last_n``), ``top`` (``None`` there); either is ``None`` when it was not asked for."""

    logprobs: list[float] | None
    top: list[list[tuple[int, float]] | None] | None = None


def check_data(data: list[Datum], vocab_size: int = 0, required: tuple[str, ...] = (), loss_fn: str = "") -> None:
    """Every datum fits before anything runs: tokens, an input per token for each of the loss's inputs (the
    ``required`` ones present), token ids that are integers within ``vocab_size`` (0: unchecked), every other input
    a finite number — the service checks a request with it before queueing it, a backend before it computes.
    Weights may be negative: ``cross_entropy`` is ``-Σ weight × log p``, and the Tinker SDK's
    ``forward_backward_custom`` sends ``weight = -∂C/∂log p`` of a loss ``C`` computed on the client, whatever its
    sign.

    Raises:
        TwinkleError: naming the datum and the field (``data[0].model_input has token id 99999, ...``).
    """
    if not data:
        raise TwinkleError("data is empty: send at least one datum")
    for i, datum in enumerate(data):
        if not len(datum.tokens):
            raise TwinkleError(f"data[{i}].model_input is empty")
        for key in required:
            if key not in datum.inputs:
                raise TwinkleError(f"data[{i}].loss_fn_inputs lacks '{key}', which {loss_fn} needs")
        for key in sorted(datum.inputs, key=lambda name: (name != "target_tokens", name)):
            size = np.asarray(datum.inputs[key], dtype=object).size
            if size != len(datum.tokens):
                raise TwinkleError(f"data[{i}].loss_fn_inputs['{key}'] has {size} values for {len(datum.tokens)} "
                                   "input tokens; give one per input token")
        for where, ids in (("model_input", datum.tokens),
                           ("loss_fn_inputs['target_tokens']", datum.inputs.get("target_tokens", []))):
            array = _token_ids(ids, f"data[{i}].{where}")
            outside = array[(array < 0) | (array >= vocab_size)] if vocab_size else array[array < 0]
            if outside.size:
                raise TwinkleError(f"data[{i}].{where} has token id {int(outside[0])}, outside the model's "
                                   + (f"vocabulary (0–{vocab_size - 1})" if vocab_size else "vocabulary (ids are 0 "
                                                                                            "or more)"))
        for key, values in datum.inputs.items():
            if key != "target_tokens":
                _check_numbers(values, f"data[{i}].loss_fn_inputs['{key}']")


def _token_ids(values: Any, where: str) -> np.ndarray:
    """``values`` as int64 token ids (integers, or floats that are whole numbers).

    Raises:
        TwinkleError: a value that is not an integer id, naming ``where`` and the value.
    """
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "f" and np.isfinite(array).all() and (array == np.round(array)).all():
        return array.astype(np.int64)
    wrong = next((v for v in array.tolist() if isinstance(v, bool) or not isinstance(v, (int, float))
                  or (isinstance(v, float) and not v.is_integer())), array.tolist()[0] if array.size else None)
    raise TwinkleError(f"{where} has {wrong!r}, which is not a token id: give integers (the tokenizer's ids)")


def _check_numbers(values: Any, where: str) -> None:
    """``values`` are finite numbers.

    Raises:
        TwinkleError: naming ``where``, the position and the value.
    """
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind not in "iuf":
        wrong = next((v for v in array.tolist() if isinstance(v, bool) or not isinstance(v, (int, float))), None)
        raise TwinkleError(f"{where} has {wrong!r}, which is not a number: give one number per input token")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise TwinkleError(f"{where} has {array[bad[0]]} at position {int(bad[0])}: give finite numbers")


Loss = Callable[[Any, dict[str, Any], dict[str, Any]], tuple[Any, Any]]
"""A loss: ``(target log-probabilities [N] tensor, the datum's inputs as tensors, the loss's settings) →
(elementwise loss [N], the datum's loss to sum)`` (``twinkle_core.lowlevel.losses``)."""


class TrainingBackend(ABC):
    """Trains and samples a plugin's models one request at a time (see the module docstring)."""

    @abstractmethod
    def base_models(self) -> list[BaseModel]:
        """The base models this backend serves (what the server offers clients)."""

    def shares_passes(self) -> bool:
        """Whether one ``forward_backward_many`` over several models' requests costs less than their passes one by
        one — so that the service batches concurrent users' passes. True on an accelerator, where a larger batch
        costs little more than a small one; on a CPU a pass costs what its rows cost (default: False)."""
        return False

    @abstractmethod
    def create(self, model_id: str, base_model: str, lora: LoraSettings) -> dict[str, Any]:
        """Add a training model: fresh adapters on ``base_model`` (loaded once, shared by every model on it) and
        an empty optimizer state. Returns what the service and clients read of it: ``vocab_size`` (token ids are
        checked against it before a request is queued), ``tokenizer``, ``lora_rank``, ``trainable_parameters``.

        Raises:
            TwinkleError: an unknown base model, or settings it cannot train (named).
        """

    @abstractmethod
    def forward_backward(self, model_id: str, data: list[Datum], loss: Loss, settings: dict[str, Any],
                         backward: bool) -> ForwardResult:
        """Each datum's target log-probabilities through ``loss``; with ``backward``, the summed loss's gradients
        are added to the model's (until ``optim_step``).

        Raises:
            TwinkleError: a datum that does not fit the model (a token outside its vocabulary, lengths that
                differ), named with the datum and the fix, before anything changes.
        """

    def forward_backward_many(self, requests: list[ForwardRequest]) -> list[ForwardResult]:
        """Several models' passes at once (the service gathers those waiting on the same base): one result per
        request, each as ``forward_backward`` would give it alone. Default: one after another; a backend that
        can run them as one batch (adapters per row) overrides it.

        Raises:
            TwinkleError: a request's data do not fit (checked for all before anything runs).
        """
        return [self.forward_backward(r.model_id, r.data, r.loss, r.settings, r.backward) for r in requests]

    @abstractmethod
    def optim_step(self, model_id: str, adam: AdamSettings) -> dict[str, float]:
        """One Adam step on the gradients accumulated since the last, then clear them; returns its metrics."""

    @abstractmethod
    def save(self, model_id: str, folder: str, optimizer: bool) -> None:
        """Write the model's adapters (and with ``optimizer`` its optimizer state) into the local ``folder``,
        exactly enough to ``load`` them again."""

    @abstractmethod
    def load(self, model_id: str, folder: str, optimizer: bool) -> None:
        """Replace the model's adapters (and with ``optimizer`` its optimizer state) with those ``save`` wrote.

        Raises:
            TwinkleError: the folder holds no saved state of a model on the same base and adapter shape.
        """

    @abstractmethod
    def sample(self, weights: str, prompt: list[int], count: int, settings: SampleSettings,
               wanted: ScoresWanted) -> tuple[list[Sequence], PromptScores | None]:
        """``count`` continuations of ``prompt`` by the adapters ``save`` wrote into the local folder
        ``weights`` (or, given a base model's name, by the base alone), with the scores ``wanted`` asks for: the
        prompt's (``None`` when neither its log-probabilities nor its top tokens were asked for) and each sampled
        position's top tokens (``Sequence.top``)."""

    @abstractmethod
    def unload(self, model_id: str) -> None:
        """Forget a training model (its adapters and optimizer state); its base stays."""
