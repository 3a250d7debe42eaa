"""QLoRA's frozen 4-bit base (``quantize_base``): the decoder's linear weights stored in NF4 — torchao's
``NF4Tensor``, QLoRA's 4-bit NormalFloat in blocks of 64 values with double-quantized scales, pure PyTorch (CPU
and GPU) — while the LoRA adapters train in the compute precision, as torchtune's QLoRA does. bitsandbytes' 4-bit
(``bnb-nf4``) is the alternative on CUDA where it is installed.

A base is quantized the same way every time (its bf16 weights, the same blocks), so a resumed or continued run
rebuilds exactly the base it trained on; checkpoints hold the adapters only.
"""

from __future__ import annotations

import copy
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from twinkle_core.errors import HyperparameterError, TwinkleError
from twinkle_core.planning import stored_bytes

QuantizeBase = Literal["auto", "none", "nf4", "bnb-nf4"]
"""``quantize_base``'s values: ``auto`` (NF4 where the full-precision base would not fit, else none), ``none``,
``nf4`` (torchao) or ``bnb-nf4`` (bitsandbytes, CUDA)."""

BLOCK_SIZE = 64
"""Values per NF4 block (one absmax scale each), QLoRA's and torchao's."""
SCALER_BLOCK_SIZE = 256
"""Scales per double-quantization block, at most (fewer where a small layer has fewer blocks)."""
AUTO_SHARE = 0.5
"""``auto`` stores the base in NF4 where its full-precision weights (fp32, as training holds a frozen base) would
take more than this share of one device's memory: the rest is left for the adapters' optimizer state, activations
and the data."""


class NF4Linear(nn.Linear):
    """A frozen linear layer whose weight is an ``NF4Tensor``, dequantized to the input's dtype for each product
    (torchao's ``linear_nf4``: its backward gives the input's gradient, never the weight's)."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> NF4Linear:
        """``linear``'s weight in NF4 (from its bf16 values, as QLoRA stores a base), its bias kept as it is.

        Raises:
            ValueError: the weight's size is not a whole number of 64-value blocks.
        """
        from torchao.quantization import to_nf4

        blocks, rest = divmod(linear.weight.numel(), BLOCK_SIZE)
        if rest:
            raise ValueError(f"{linear.weight.numel()} weights are not whole blocks of {BLOCK_SIZE}")
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().to(torch.bfloat16)
        layer.weight = nn.Parameter(to_nf4(weight, BLOCK_SIZE, math.gcd(blocks, SCALER_BLOCK_SIZE)),
                                    requires_grad=False)
        layer.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        return layer

    def __deepcopy__(self, memo: dict[int, Any]) -> NF4Linear:
        """A copy sharing the frozen NF4 weight (torchao's clone would quantize it again, with other blocks), unless
        ``memo`` already maps it (``dequantized`` does)."""
        if is_nf4(self.weight):  # never changes: shared (a plain weight is copied, as merging writes into it)
            memo.setdefault(id(self.weight), self.weight)
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update({key: copy.deepcopy(value, memo) for key, value in self.__dict__.items()})
        return clone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x Wᵀ + b`` with ``W`` dequantized to ``x``'s dtype (a plain weight, once dequantized: ``F.linear``)."""
        if is_nf4(self.weight):
            from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4

            out = linear_nf4(x, self.weight)
            return out if self.bias is None else out + self.bias.to(out.dtype)
        return F.linear(x, self.weight, self.bias)


def is_nf4(tensor: Any) -> bool:
    """Whether ``tensor`` (or a parameter's data) is torchao's ``NF4Tensor``."""
    return type(getattr(tensor, "data", tensor)).__name__ == "NF4Tensor"


@dataclass(frozen=True)
class Quantized:
    """What ``quantize_nf4`` did.

    Attributes:
        layers: linear layers stored in NF4.
        kept: linear layers left in full precision (a size that is not whole 64-value blocks), by name.
        full_bytes: those weights' bytes in bf16.
        nf4_bytes: their bytes in NF4 (codes, scales and the scales' own factors).
    """

    layers: int
    kept: tuple[str, ...]
    full_bytes: int
    nf4_bytes: int


def quantize_nf4(model: nn.Module) -> Quantized:
    """Every linear layer of ``model``'s decoder (not the output head, as QLoRA and peft leave it) replaced in place
    by an ``NF4Linear``. Call it before LoRA adapters are added.

    Raises:
        HyperparameterError: torchao is not installed (the fix: the ``qlora`` extra).
    """
    require_torchao()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    layers, full, packed, kept = 0, 0, 0, []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is not nn.Linear or child is head:
                continue
            qualified = f"{name}.{child_name}" if name else child_name
            try:
                layer = NF4Linear.from_linear(child)
            except ValueError:
                kept.append(qualified)
                continue
            setattr(module, child_name, layer)
            layers, full = layers + 1, full + 2 * child.weight.numel()
            packed += stored_bytes(layer.weight)
    return Quantized(layers, tuple(kept), full, packed)


def load_nf4(folder: str, **options: Any) -> tuple[nn.Module, Quantized]:
    """A model folder loaded in bf16 (half of an fp32 load's peak), its decoder's linear weights then stored in NF4
    (``quantize_nf4``), every other weight (embeddings, norms, the output head) cast to fp32 in place (tied weights
    stay one tensor) — their values bf16's, as QLoRA and torchtune keep a base. transformers keeps the rotary
    frequencies in fp32 whatever the load's dtype.

    Raises:
        HyperparameterError: torchao is not installed.
    """
    from twinkle_llm.folders import load_folder_model

    require_torchao()
    model = load_folder_model(folder, dtype=torch.bfloat16, **options)
    done = quantize_nf4(model)
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.is_floating_point() and not is_nf4(tensor):
            tensor.data = tensor.data.to(torch.float32)
    model.config.dtype = torch.float32
    return model, done


def dequantized(model: nn.Module, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A copy of ``model`` whose NF4 weights are plain ``dtype`` tensors with the values the quantized layers
    compute with (``model`` itself is left as it is). A model without NF4 weights is returned as it is."""
    nf4 = {id(p): p for p in model.parameters() if is_nf4(p)}
    if not nf4:
        return model
    memo = {key: nn.Parameter(p.to(dtype), requires_grad=False) for key, p in nf4.items()}
    return copy.deepcopy(model, memo)


def folder_parameters(folder: str) -> int:
    """The values in a model folder's ``*.safetensors`` files, read from their headers (nothing is loaded)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(folder).expanduser().glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as file:
            for key in file.keys():
                total += math.prod(file.get_slice(key).get_shape())
    return total


def require_torchao() -> None:
    """Raise a named error where torchao is missing.

    Raises:
        HyperparameterError: torchao is not installed.
    """
    if importlib.util.find_spec("torchao") is None:
        raise HyperparameterError("'quantize_base' = 'nf4' stores the base with torchao, which is not installed: "
                                  "pip install 'twinkle-llm[qlora]' (torchao), or set quantize_base='none'")


def require_bitsandbytes() -> None:
    """Raise a named error where bitsandbytes' 4-bit cannot run: not installed, or no CUDA device.

    Raises:
        HyperparameterError: bitsandbytes is not installed; TwinkleError: no CUDA device.
    """
    if importlib.util.find_spec("bitsandbytes") is None:
        raise HyperparameterError("'quantize_base' = 'bnb-nf4' needs bitsandbytes, which is not installed: pip "
                                  "install bitsandbytes on a CUDA machine, or use quantize_base='nf4' (torchao: CPU "
                                  "and GPU)")
    if not torch.cuda.is_available():
        raise TwinkleError("'quantize_base' = 'bnb-nf4' runs bitsandbytes' 4-bit kernels, which need a CUDA device; "
                           "this process has none: use quantize_base='nf4' (torchao runs on the CPU too)")


def bnb_options(compute: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    """``from_pretrained`` options that load a base in bitsandbytes' NF4 with double quantization (QLoRA's recipe),
    the decoder's products computed in ``compute``."""
    from transformers import BitsAndBytesConfig

    return {"quantization_config": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                      bnb_4bit_use_double_quant=True,
                                                      bnb_4bit_compute_dtype=compute),
            "device_map": {"": torch.cuda.current_device()}}


def choose(given: str, parameters: int, memory_bytes: int) -> tuple[str, str]:
    """``quantize_base``'s value for a base of ``parameters`` values on a device of ``memory_bytes``, and why.

    ``auto`` stores the base in NF4 where its fp32 weights (4 B each, as training holds a frozen base) exceed
    ``AUTO_SHARE`` of the memory; a given value is kept.
    """
    fp32 = 4 * parameters
    sizes = (f"the base's {parameters / 1e6:.1f} M weights take {_size(fp32)} in fp32; {AUTO_SHARE:.0%} of this "
             f"device's {_size(memory_bytes)} is {_size(AUTO_SHARE * memory_bytes)}")
    if given != "auto":
        return given, f"given ({sizes})"
    if fp32 > AUTO_SHARE * memory_bytes:
        return "nf4", f"{sizes}: the fp32 base does not fit it, so its linear weights are stored in NF4 (QLoRA)"
    return "none", f"{sizes}: the fp32 base fits, so it is kept in full precision (quantize_base='nf4' stores it in 4 bits)"


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{int(n)} B"
