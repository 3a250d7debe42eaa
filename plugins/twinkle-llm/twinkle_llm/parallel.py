"""How a Llama-shaped decoder (Llama, Qwen2, Qwen3 from ``transformers``) splits over a tensor-parallel mesh.

The plan torchtitan and torchtune use for Llama, on transformers' module names:

* attention: ``q_proj``, ``k_proj``, ``v_proj`` column-wise (each rank keeps its heads), ``o_proj`` row-wise;
* MLP: ``gate_proj`` and ``up_proj`` column-wise, ``down_proj`` row-wise;
* sequence parallel between them: the norms (``input_layernorm``, ``post_attention_layernorm``, ``model.norm``)
  and the residual stream work on each rank's slice of the sequence; attention and the MLP gather the sequence
  first, and their row-wise outputs reduce-scatter back to slices;
* the token embedding split by vocabulary rows (its output replicated: transformers builds the causal mask and
  positions from it), the first layer taking its slice of the sequence, and ``lm_head`` column-wise by
  vocabulary (``lm_head`` and the embedding stay one tensor where the model ties them);
* loss parallel: the logits stay split by vocabulary, and the cross-entropy and its backward run on the shards
  (``torch.distributed.tensor.parallel.loss_parallel``), so no rank holds a whole ``batch × length × vocab``.

And how it cuts into pipeline stages (``DecoderStage``, ``decoder_stages``): runs of decoder layers, the embedding
with the first and the final norm and head with the last, as torchtitan cuts Llama.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from twinkle_core.errors import HyperparameterError, TwinkleError


def check_divisible(config: Any, size: int) -> None:
    """Refuse a degree that does not divide the heads, key/value heads, MLP width and vocabulary.

    Raises:
        HyperparameterError: naming the size that does not divide.
    """
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        value = getattr(config, name, None)
        if value is not None and value % size:
            raise HyperparameterError(f"tensor_parallel_size={size} does not divide the model's {name} ({value}); "
                                      f"use a tensor-parallel size that divides it")


def llama_plan(config: Any, size: int, split_logits: bool = True) -> dict[str, Any]:
    """The ``parallelize_module`` plan of a transformers ``*ForCausalLM`` of the Llama shape over ``size`` ranks;
    without ``split_logits`` (pipeline stages hand plain tensors on) ``lm_head`` gathers whole logits instead of
    leaving them split for loss parallel."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    check_divisible(config, size)
    layer = "model.layers.*."
    return {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "model.layers.0": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                             use_local_output=True),
        layer + "input_layernorm": SequenceParallel(),
        layer + "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        layer + "self_attn.q_proj": ColwiseParallel(),
        layer + "self_attn.k_proj": ColwiseParallel(),
        layer + "self_attn.v_proj": ColwiseParallel(),
        layer + "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        layer + "post_attention_layernorm": SequenceParallel(),
        layer + "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        layer + "mlp.gate_proj": ColwiseParallel(),
        layer + "mlp.up_proj": ColwiseParallel(),
        layer + "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
        if split_logits else ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }


class DecoderStage(nn.Module):
    """A run of consecutive decoder layers of a transformers ``*ForCausalLM`` as one pipeline stage — the token
    embedding before them on the first stage, the final norm and ``lm_head`` after them on the last — doing what
    the model's own forward does for those layers (positions, rotary embeddings and the causal mask, which keeps
    packed documents apart, are rebuilt from the position ids every stage receives).

    Inputs and outputs: ``(token ids, position ids)`` into the first stage, ``(hidden states, position ids)``
    between stages, logits out of the last.
    """

    def __init__(self, model: nn.Module, layers: range, first: bool, last: bool) -> None:
        """The stage of ``model`` (shared, not copied) holding decoder layers ``layers``."""
        super().__init__()
        body = model.model
        self.config = model.config
        self.embed = body.embed_tokens if first else None
        self.layers = nn.ModuleList(body.layers[i] for i in layers)
        self.rotary = body.rotary_emb
        self.norm, self.head = (body.norm, model.lm_head) if last else (None, None)

    def forward(self, values: torch.Tensor, position_ids: torch.Tensor) -> Any:
        """The stage's output (see the class)."""
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        hidden = self.embed(values) if self.embed is not None else values
        batch, length = position_ids.shape
        local = hidden.to_local() if hasattr(hidden, "to_local") else hidden
        shape = torch.empty(batch, length, 0, dtype=local.dtype, device=local.device)
        options = {"config": self.config, "inputs_embeds": shape, "attention_mask": None, "cache": None,
                   "position_ids": position_ids}
        kinds = {getattr(layer, "attention_type", "full_attention") for layer in self.layers}
        masks = {"full_attention": create_causal_mask(**options)}
        if "sliding_attention" in kinds:
            masks["sliding_attention"] = create_sliding_window_causal_mask(**options)
        rotary = self.rotary(shape, position_ids=position_ids)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=masks[getattr(layer, "attention_type", "full_attention")],
                           position_embeddings=rotary, position_ids=position_ids, use_cache=False)
        if self.head is None:
            return hidden, position_ids
        return self.head(self.norm(hidden))


def decoder_stages(model: nn.Module, stages: int) -> list[DecoderStage]:
    """``model``'s decoder layers in ``stages`` runs as even as they go (the first stage, which also embeds, and
    the last, which also predicts, get the fewer when they do not divide).

    Raises:
        TwinkleError: fewer layers than stages.
    """
    count = len(model.model.layers)
    if count < stages:
        raise TwinkleError(f"{count} decoder layers cannot make {stages} pipeline stages; use "
                           f"pipeline_parallel_size <= {count}")
    sizes = [count // stages] * stages
    order = [*range(1, stages - 1), stages - 1, 0]  # the remainder: middle stages first, then the last, the first
    for extra in range(count % stages):
        sizes[order[extra]] += 1
    bounds = [sum(sizes[:i]) for i in range(stages + 1)]
    return [DecoderStage(model, range(bounds[i], bounds[i + 1]), i == 0, i == stages - 1) for i in range(stages)]
