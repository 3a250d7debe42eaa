"""``LoraBackend``: twinkle-llm's training backend for ``twinkle serve --tinker`` — LoRA adapters trained step by
step on shared base models.

Each base model (a local Hugging Face folder the server's admin names) is loaded once, frozen, and wrapped by
peft; every training model is one more named adapter on it, with its own AdamW state. A request activates its
model's adapter (peft's ``set_adapter``), so one base serves every user's adapters without a copy. Sampler
weights are adapters too, loaded read-only from the folder ``save`` wrote. Nothing is downloaded; folders are
read as twinkle-llm reads them (safetensors only, ``tokenizer.json``).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import (
    AdamSettings,
    BaseModel,
    Datum,
    ForwardRequest,
    ForwardResult,
    Loss,
    LoraSettings,
    PromptScores,
    SampleSettings,
    ScoresWanted,
    Sequence,
    TrainingBackend,
    check_data,
)

from twinkle_llm.folders import load_folder_model, read_config, tokenizer_file
from twinkle_llm.rl import draw_tokens
from twinkle_llm.tokenizing import TextTokenizer

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
ADAPTER_FILE = "adapter_model.safetensors"
"""The adapter's weights, named and laid out as peft's ``save_pretrained`` writes them: with
``adapter_config.json`` beside it, every saved folder is a peft adapter folder (``PeftModel.from_pretrained``,
twinkle-llm's ``adapter=``)."""
OPTIMIZER_FILE = "optimizer.safetensors"
SETTINGS_FILE = "adapter.json"
"""The Tinker model's settings (base name, rank, layers) and the optimizer's step counts."""
_EARLIER_ADAPTER_FILE = "adapter.safetensors"  # what twinkle 0.2's first Tinker saves named it


@dataclass
class _Model:
    """A training model: its base, its adapter's name on that base, its settings and its optimizer."""

    base: str
    adapter: str
    lora: LoraSettings
    optimizer: torch.optim.AdamW

    def train(self) -> None:
        """Mark the adapter's parameters (the optimizer's) trainable: peft's ``set_adapter`` leaves only the
        active adapter so, and a batch may train several."""
        for group in self.optimizer.param_groups:
            for param in group["params"]:
                param.requires_grad_(True)


class LoraBackend(TrainingBackend):
    """LoRA training and sampling on the base models ``models`` names (see the module docstring)."""

    def __init__(self, models: dict[str, str] | None = None) -> None:
        """Serve ``models``: base model names → local Hugging Face folders (each checked when first used)."""
        self.folders = {str(name): str(folder) for name, folder in (models or {}).items()}
        self._bases: dict[str, Any] = {}
        self._models: dict[str, _Model] = {}
        self._samplers: dict[str, str] = {}
        self._count = 0

    # ------------------------------------------------------------ models
    def base_models(self) -> list[BaseModel]:
        """The configured folders, with their context length and tokenizer."""
        found = []
        for name, folder in self.folders.items():
            config = read_config(folder)
            found.append(BaseModel(name, config.get("max_position_embeddings"), str(tokenizer_file(folder))))
        return found

    def _base(self, name: str) -> Any:
        """The base's peft model (loaded and wrapped on first use), its weights frozen."""
        if name in self._bases:
            return self._bases[name]
        if name not in self.folders:
            raise TwinkleError(f"base_model '{name}' is not served here; this server offers "
                               f"{', '.join(sorted(self.folders)) or 'no base model (start it with --tinker-model NAME=FOLDER)'}")
        folder = self.folders[name]
        read_config(folder)
        model = load_folder_model(folder, dtype=torch.float32)
        model.requires_grad_(False).eval()
        from tokenizers import Tokenizer

        self._bases[name] = {"model": model, "peft": None, "tokenizer": Tokenizer.from_file(str(tokenizer_file(folder))),
                             "vocab": int(model.config.vocab_size), "layers": None,
                             # where a sample ends without stop sequences: the configs' eos ids, the tokenizer's
                             # eos_token and the chat template's end of turn
                             "stops": _stop_ids(folder)}
        return self._bases[name]

    def create(self, model_id: str, base_model: str, lora: LoraSettings) -> dict[str, Any]:
        """A fresh adapter on ``base_model`` (B initialised to zero: the model starts as its base)."""
        base = self._base(base_model)
        if lora.rank < 1:
            raise TwinkleError(f"lora rank {lora.rank} must be at least 1")
        targets = [*(ATTENTION if lora.train_attn else ()), *(MLP if lora.train_mlp else ()),
                   *(("lm_head",) if lora.train_unembed else ())]
        if not targets:
            raise TwinkleError("the adapters adapt nothing: set train_attn, train_mlp or train_unembed")
        self._count += 1
        adapter = f"adapter{self._count}"
        self._add_adapter(base, adapter, lora.rank, targets, lora.seed)
        params = self._parameters(base, adapter)
        self._models[model_id] = _Model(base_model, adapter, lora, torch.optim.AdamW(params, lr=1e-4))
        return {"lora_rank": lora.rank, "tokenizer": str(tokenizer_file(self.folders[base_model])),
                "vocab_size": base["vocab"], "trainable_parameters": int(sum(p.numel() for p in params))}

    def _add_adapter(self, base: dict[str, Any], adapter: str, rank: int, targets: list[str], seed: int | None) -> None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0,
                            task_type="CAUSAL_LM")
        state = torch.random.get_rng_state()
        torch.manual_seed(0 if seed is None else seed)
        base["layers"] = None  # the adapter layers are found again (new targets wrap more layers)
        try:
            if base["peft"] is None:
                base["peft"] = get_peft_model(base["model"], config, adapter_name=adapter)
            else:
                base["peft"].add_adapter(adapter, config)
        except ValueError as err:  # a layer this architecture does not have
            raise TwinkleError(f"LoRA on {', '.join(targets)} does not fit this base model: {err}") from err
        finally:
            torch.random.set_rng_state(state)

    @staticmethod
    def _parameters(base: dict[str, Any], adapter: str) -> list[torch.nn.Parameter]:
        """The adapter's own parameters, in a fixed order, set to train."""
        params = [p for name, p in base["peft"].named_parameters() if f".{adapter}." in name]
        for p in params:
            p.requires_grad_(True)
        return params

    def _lookup(self, model_id: str) -> tuple[_Model, dict[str, Any]]:
        model = self._models.get(model_id)
        if model is None:
            raise TwinkleError(f"model '{model_id}' is not loaded")
        return model, self._bases[model.base]

    @staticmethod
    def _use(base: dict[str, Any], adapter: str) -> None:
        """Make ``adapter`` the base's active one, when it changes: each adapter layer's ``set_adapter``, as
        peft's model-wide ``set_adapter`` does, but over the base's adapter layers found once (``base["layers"]``,
        found again after adapters are added or deleted) instead of a walk of every module per switch (3 ms of a
        9 ms step on the bench's base, where requests of four users alternate)."""
        network = base["peft"]
        if network.active_adapter == adapter:
            return
        if base["layers"] is None:
            from peft.tuners.tuners_utils import BaseTunerLayer

            base["layers"] = [m for m in network.modules() if isinstance(m, BaseTunerLayer)]
        for layer in base["layers"]:
            layer.set_adapter(adapter)
        network.active_adapter = network.base_model.active_adapter = adapter  # what peft's own set_adapter records

    def unload(self, model_id: str) -> None:
        """Drop the model's adapter and optimizer."""
        model = self._models.pop(model_id, None)
        if model is not None:
            base = self._bases[model.base]
            base["peft"].delete_adapter(model.adapter)
            base["layers"] = None

    # ------------------------------------------------------------ training
    def forward_backward(self, model_id: str, data: list[Datum], loss: Loss, settings: dict[str, Any],
                         backward: bool) -> ForwardResult:
        """One model's pass (``forward_backward_many`` of one request)."""
        return self.forward_backward_many([ForwardRequest(model_id, data, loss, settings, backward)])[0]

    def forward_backward_many(self, requests: list[ForwardRequest]) -> list[ForwardResult]:
        """Every request's data in one padded batch per base, each row through its own model's adapter (peft's
        per-row ``adapter_names``): target log-probabilities, each request's loss, and the gradients of those
        with ``backward`` (a row only reaches its own adapter, so each model gets exactly its own gradients)."""
        results: dict[int, ForwardResult] = {}
        by_base: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            model = self._models.get(request.model_id)
            if model is None:
                raise TwinkleError(f"model '{request.model_id}' is not loaded")
            check_data(request.data, self._bases[model.base]["vocab"])
            by_base.setdefault(model.base, []).append(index)
        for base_name, indices in by_base.items():
            for index, result in zip(indices, self._batch(self._bases[base_name], [requests[i] for i in indices])):
                results[index] = result
        return [results[i] for i in range(len(requests))]

    def _batch(self, base: dict[str, Any], requests: list[ForwardRequest]) -> list[ForwardResult]:
        network = base["peft"]
        if network.training:  # no dropout anywhere (the adapters have none): training and evaluation passes agree
            network.eval()
        rows = [(r, datum) for r in requests for datum in r.data]
        lengths = [len(datum.tokens) for _, datum in rows]
        ids = torch.zeros(len(rows), max(lengths), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (_, datum) in enumerate(rows):
            ids[row, :lengths[row]] = torch.as_tensor(datum.tokens, dtype=torch.long)
            mask[row, :lengths[row]] = 1
        adapters = [self._models[r.model_id].adapter for r, _ in rows]
        backward = any(r.backward for r in requests)
        per_row = {"adapter_names": adapters} if len(set(adapters)) > 1 else {}  # one model: peft's plain path
        if not per_row:
            self._use(base, adapters[0])
        for request in requests:
            if request.backward:
                self._models[request.model_id].train()
        with torch.set_grad_enabled(backward):
            logits = network(input_ids=ids, attention_mask=mask, **per_row).logits.float()
            logprobs = torch.log_softmax(logits, dim=-1)
            total = torch.zeros(())
            outputs: dict[int, list[dict[str, np.ndarray]]] = {id(r): [] for r in requests}
            sums: dict[int, torch.Tensor] = {id(r): torch.zeros(()) for r in requests}
            for row, (request, datum) in enumerate(rows):
                inputs = {k: torch.tensor(np.asarray(v)).reshape(-1) for k, v in datum.inputs.items()}
                picked = logprobs[row, :lengths[row]].gather(-1, inputs["target_tokens"].long()[:, None]).squeeze(-1)
                elementwise, summed = request.loss(picked, inputs, request.settings)
                sums[id(request)] = sums[id(request)] + summed
                if request.backward:
                    total = total + summed
                outputs[id(request)].append({"logprobs": picked.detach().numpy().astype(np.float32),
                                             "elementwise_loss": elementwise.detach().numpy().astype(np.float32)})
            if backward:
                total.backward()
        return [ForwardResult(outputs[id(r)], {"loss:sum": float(sums[id(r)].detach())}) for r in requests]

    def optim_step(self, model_id: str, adam: AdamSettings) -> dict[str, float]:
        """AdamW with this step's settings, gradients clipped at ``grad_clip_norm`` (when not 0)."""
        model, _ = self._lookup(model_id)
        params = [p for group in model.optimizer.param_groups for p in group["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, adam.grad_clip_norm if adam.grad_clip_norm > 0 else math.inf)
        for group in model.optimizer.param_groups:
            group.update(lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps,
                         weight_decay=adam.weight_decay)
        model.optimizer.step()
        model.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(norm), "learning_rate": float(adam.learning_rate)}

    # ------------------------------------------------------------ state
    def save(self, model_id: str, folder: str, optimizer: bool) -> None:
        """The adapter (safetensors), its settings, and with ``optimizer`` AdamW's state (safetensors tensors and
        JSON counts): no pickle, so a saved folder never runs code when loaded."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        model, base = self._lookup(model_id)
        os.makedirs(folder, exist_ok=True)
        state = get_peft_model_state_dict(base["peft"], adapter_name=model.adapter, save_embedding_layers=False)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, os.path.join(folder, ADAPTER_FILE))
        config = copy.copy(base["peft"].peft_config[model.adapter])
        config.base_model_name_or_path = self.folders[model.base]
        config.save_pretrained(folder)  # adapter_config.json, as peft writes it
        settings = {"base_model": model.base, "lora_rank": model.lora.rank, "train_attn": model.lora.train_attn,
                    "train_mlp": model.lora.train_mlp, "train_unembed": model.lora.train_unembed}
        if optimizer:
            tensors, counts = {}, {}
            for index, slot in model.optimizer.state_dict()["state"].items():
                for key, value in slot.items():
                    if torch.is_tensor(value) and key != "step":
                        tensors[f"{index}.{key}"] = value.contiguous()
                    else:
                        counts[f"{index}.{key}"] = float(value)
            save_file(tensors, os.path.join(folder, OPTIMIZER_FILE))
            settings["optimizer_counts"] = counts
        with open(os.path.join(folder, SETTINGS_FILE), "w", encoding="utf-8") as handle:
            json.dump(settings, handle)

    def _read(self, folder: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        from safetensors.torch import load_file

        try:
            with open(os.path.join(folder, SETTINGS_FILE), encoding="utf-8") as handle:
                settings = json.load(handle)
            weights = os.path.join(folder, ADAPTER_FILE)
            if not os.path.exists(weights):
                weights = os.path.join(folder, _EARLIER_ADAPTER_FILE)
            return settings, load_file(weights)
        except (OSError, ValueError) as err:
            raise TwinkleError(f"'{folder}' holds no saved adapter ({err})") from None

    def load(self, model_id: str, folder: str, optimizer: bool) -> None:
        """The saved adapter (and optimizer state) into the model, which must have the same base and rank."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        model, base = self._lookup(model_id)
        settings, state = self._read(folder)
        if settings.get("base_model") != model.base or settings.get("lora_rank") != model.lora.rank:
            raise TwinkleError(f"the checkpoint is a rank-{settings.get('lora_rank')} adapter of "
                               f"'{settings.get('base_model')}'; this model is rank {model.lora.rank} on '{model.base}'")
        if optimizer and "optimizer_counts" not in settings:
            raise TwinkleError("the checkpoint holds no optimizer state (saved for sampling); load it without the "
                               "optimizer")
        set_peft_model_state_dict(base["peft"], state, adapter_name=model.adapter)
        if optimizer:
            tensors = load_file(os.path.join(folder, OPTIMIZER_FILE))
            slots: dict[int, dict[str, Any]] = {}
            for key, value in tensors.items():
                index, name = key.split(".", 1)
                slots.setdefault(int(index), {})[name] = value
            for key, value in settings["optimizer_counts"].items():
                index, name = key.split(".", 1)
                slots.setdefault(int(index), {})[name] = torch.tensor(value) if name == "step" else value
            current = model.optimizer.state_dict()
            model.optimizer.load_state_dict({"state": slots, "param_groups": current["param_groups"]})
        else:
            model.optimizer.state.clear()

    # ------------------------------------------------------------ sampling
    def sample(self, weights: str, prompt: list[int], count: int, settings: SampleSettings,
               wanted: ScoresWanted) -> tuple[list[Sequence], PromptScores | None]:
        """Autoregressive sampling with the adapter in ``weights`` (or a base alone, by name); the prompt's scores
        come from the same pass that starts the samples."""
        base, network = self._sampler(weights)
        check_data([Datum(list(prompt))], base["vocab"])
        wanted.check(len(prompt))
        generator = torch.Generator().manual_seed(settings.seed) if settings.seed is not None else None
        stops = self._stops(base, settings)
        ids = torch.as_tensor([prompt], dtype=torch.long)
        with torch.no_grad():
            first = network(input_ids=ids, use_cache=True)
            scored = _prompt_scores(first.logits[0].float(), prompt, wanted) \
                if wanted.prompt or wanted.prompt_top else None
            sequences = self._continue(network, first, count, settings, stops, generator, wanted.sampled_top)
        return sequences, scored

    def _sampler(self, weights: str) -> tuple[dict[str, Any], Any]:
        """The base and the network to sample with: the adapter saved in the folder ``weights`` (loaded once, as
        its own adapter), or a base model by name (adapters off)."""
        if weights in self.folders:
            base = self._base(weights)
            return base, _BaseOnly(base)
        from peft import set_peft_model_state_dict

        settings, state = self._read(weights)
        base = self._base(settings["base_model"])
        adapter = self._samplers.get(weights)
        if adapter is None:
            self._count += 1
            adapter = f"sampler{self._count}"
            targets = [*(ATTENTION if settings.get("train_attn", True) else ()),
                       *(MLP if settings.get("train_mlp", True) else ()),
                       *(("lm_head",) if settings.get("train_unembed", True) else ())]
            self._add_adapter(base, adapter, int(settings["lora_rank"]), targets, 0)
            set_peft_model_state_dict(base["peft"], state, adapter_name=adapter)
            self._samplers[weights] = adapter
        self._use(base, adapter)
        base["peft"].eval()
        return base, base["peft"]

    @staticmethod
    def _stops(base: dict[str, Any], settings: SampleSettings) -> _Stops:
        """What ends a sample: the base's end-of-text tokens (no ``stop`` given), or the ids and strings given (a
        string of one token as that token; a longer one is looked for in the decoded sample, as the Tinker SDK's
        renderers' ``\\n\\nUser:``)."""
        if settings.stop is None:
            return _Stops(set(base["stops"]), [], base["tokenizer"])
        ids, texts = set(), []
        for item in settings.stop:
            if isinstance(item, int):
                ids.add(item)
            elif item:
                encoded = base["tokenizer"].encode(item, add_special_tokens=False).ids
                if len(encoded) == 1:
                    ids.add(encoded[0])
                else:
                    texts.append(item)
        return _Stops(ids, texts, base["tokenizer"])

    @staticmethod
    def _continue(network: Any, first: Any, count: int, settings: SampleSettings, stops: _Stops,
                  generator: torch.Generator | None, top: int = 0) -> list[Sequence]:
        """``count`` independent continuations of the prompt's pass ``first``, decoded together: the prompt's cache
        is repeated for each (its pass computed once), a continuation that reached a stop leaves the batch with its
        cache row, and decoding ends when none is left (as the ``local`` rollout engine, ``rl.sample_completions``).
        Each row's token is drawn from its own tempered distribution cut to ``top_k`` / ``top_p`` (``choose_tokens``);
        with ``top``, each position's ``top`` likeliest tokens (of the model's own distribution, before
        temperature)."""
        cache = first.cache
        if count > 1:
            cache.batch_repeat_interleave(count)
        logits = first.logits[:, -1].float().expand(count, -1)
        tokens: list[list[int]] = [[] for _ in range(count)]
        logprobs: list[list[float]] = [[] for _ in range(count)]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(count)]
        ended: list[bool] = [False] * count
        alive = list(range(count))  # the rows still decoding, in the cache's order
        for step in range(settings.max_tokens):
            scores = torch.log_softmax(logits, dim=-1)
            chosen = choose_tokens(logits, settings, generator)
            picked = scores.gather(-1, chosen[:, None]).squeeze(-1).tolist()
            best = torch.topk(scores, min(top, scores.shape[-1])) if top else None
            going = []
            for j, row in enumerate(alive):
                tokens[row].append(int(chosen[j]))
                logprobs[row].append(picked[j])
                if best is not None:
                    tops[row].append(list(zip(best.indices[j].tolist(), best.values[j].tolist())))
                if stops.ended(tokens[row]):
                    ended[row] = True
                else:
                    going.append(j)
            if not going or step == settings.max_tokens - 1:
                break
            if len(going) < len(alive):
                kept = torch.tensor(going)
                cache.batch_select_indices(kept)
                chosen, alive = chosen[kept], [alive[j] for j in going]
            out = network(input_ids=chosen[:, None], cache=cache, use_cache=True)
            logits = out.logits[:, -1].float()
        return [Sequence(tokens[row], logprobs[row], "stop" if ended[row] else "length", tops[row] if top else None)
                for row in range(count)]


@dataclass
class _Stops:
    """A sample ends at one of ``ids``, or once its decoded text holds one of ``texts`` (the stop's tokens are kept
    in the sample, as they are for a stop token)."""

    ids: set[int]
    texts: list[str]
    tokenizer: Any

    def ended(self, tokens: list[int]) -> bool:
        """Whether the sample ``tokens`` (its last one just drawn) has reached a stop."""
        if tokens[-1] in self.ids:
            return True
        if not self.texts:
            return False
        longest = max(len(text) for text in self.texts)
        # the text the last tokens spell (each token is at least one character): enough to hold any stop string
        tail = self.tokenizer.decode(tokens[-longest:], skip_special_tokens=False)
        return any(text in tail for text in self.texts)


class _BaseOnly:
    """A base model with every adapter switched off (``peft``'s ``disable_adapter``), called like the model."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base

    def __call__(self, **inputs: Any) -> Any:
        if self.base["peft"] is None:
            return self.base["model"](**inputs)
        with self.base["peft"].disable_adapter():
            return self.base["peft"](**inputs)


def _prompt_scores(logits: torch.Tensor, prompt: list[int], wanted: ScoresWanted) -> PromptScores:
    """The prompt's scores from its pass's ``logits`` ``[L, V]``: position ``i`` is scored by the distribution after
    the tokens before it (none for the first, nor before ``wanted.last_n``)."""
    logprobs = torch.log_softmax(logits[:-1], dim=-1)  # row i predicts prompt token i + 1
    start = 1 if wanted.last_n is None else len(prompt) - wanted.last_n
    values: list[float] | None = None
    if wanted.prompt:
        picked = logprobs.gather(-1, torch.as_tensor(prompt[1:], dtype=torch.long)[:, None]).squeeze(-1).tolist()
        values = [math.nan] * start + picked[start - 1:]
    top: list[list[tuple[int, float]] | None] | None = None
    if wanted.prompt_top:
        best = torch.topk(logprobs[start - 1:], min(wanted.prompt_top, logprobs.shape[-1]))
        top = [None] * start + [list(zip(ids, values_)) for ids, values_ in zip(best.indices.tolist(),
                                                                                  best.values.tolist())]
    return PromptScores(values, top)


def choose_tokens(logits: torch.Tensor, settings: SampleSettings, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """The next token of each row of ``logits`` ``[N, V]``: greedy at temperature 0, else drawn from the row's
    tempered distribution cut to its ``top_k`` likeliest tokens, then to the smallest likeliest set holding ``top_p``
    of what is left (the likeliest always kept; the order of transformers' ``TopKLogitsWarper`` and
    ``TopPLogitsWarper``), renormalised: drawn by ``rl.draw_tokens`` (the Gumbel-max trick) from ``generator``
    (torch's global one by default). What a Tinker ``sample`` request's ``SamplingParams`` ask for, a row per
    sample."""
    if settings.temperature <= 0:
        return logits.argmax(-1)
    scaled = logits / settings.temperature
    if settings.top_k > 0:
        kth = torch.topk(scaled, min(settings.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    if settings.top_p < 1.0:
        ordered, order = torch.sort(torch.softmax(scaled, dim=-1), dim=-1, descending=True)
        cut = torch.cumsum(ordered, dim=-1) - ordered >= settings.top_p
        cut[:, 0] = False
        scaled = scaled.masked_fill(torch.zeros_like(cut).scatter(-1, order, cut), -math.inf)
    return draw_tokens(scaled, 1.0, generator)


def _stop_ids(folder: str) -> set[int]:
    """Every id a sample of the base in ``folder`` ends at without stop sequences (``TextTokenizer.stop_ids``); none
    for a folder that names no end-of-text token (its samples run to ``max_tokens``, as they did before)."""
    try:
        return set(TextTokenizer.from_folder(folder).stop_ids)
    except TwinkleError:
        return set()

