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
"""

from __future__ import annotations

from typing import Any

from twinkle_core.errors import HyperparameterError


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


def llama_plan(config: Any, size: int) -> dict[str, Any]:
    """The ``parallelize_module`` plan of a transformers ``*ForCausalLM`` of the Llama shape over ``size`` ranks."""
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
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
