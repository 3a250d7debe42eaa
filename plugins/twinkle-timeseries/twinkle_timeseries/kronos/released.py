"""The released Kronos models (``Kronos-Tokenizer-base``, ``Kronos-mini``/``small``/``base``) as Twinkle loads them.

A released model is a Hugging Face–style folder: ``config.json`` (the reference implementation's constructor
arguments) beside ``model.safetensors``. Twinkle's Kronos has the reference's module names and shapes, so tensors
load name for name; what the reference keeps but Twinkle computes (the rotary ``inv_freq`` buffers, the
quantiser's ``basis`` buffers) is reported as ignored. A fixed (sinusoidal) time-embedding table of a model built
with ``learn_te: false`` loads into the learned table of the same field.

The folder's config sets the sizes (as a timm folder's ``pretrained_cfg`` does): ``tokenizer_sizes`` and
``predictor_sizes`` turn it into ``KronosModel`` hyperparameters.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import torch
from safetensors.torch import save
from torch import nn

from twinkle_core.data import atomic_write_bytes
from twinkle_core.errors import HyperparameterError
from twinkle_core.pretrained import Weights, WeightsError, WeightsReport, load_weights

TOKENIZER_KEYS = ("d_in", "d_model", "n_heads", "ff_dim", "n_enc_layers", "n_dec_layers", "s1_bits", "s2_bits")
"""What a released tokenizer's ``config.json`` must say."""

PREDICTOR_KEYS = ("s1_bits", "s2_bits", "n_layers", "d_model", "n_heads", "ff_dim")
"""What a released predictor's ``config.json`` must say."""

FEATURES = {6: ["open", "high", "low", "close", "volume", "amount"], 5: ["open", "high", "low", "close", "volume"]}
"""The bars a tokenizer with ``d_in`` inputs reads, in order (the released ones read six: ``amount`` last)."""


def _config(weights: Weights, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    missing = [k for k in keys if k not in weights.config]
    if missing:
        raise WeightsError(f"{what} '{weights.source}': its config.json lacks {', '.join(missing)}; give the "
                           "released folder (config.json beside model.safetensors)")
    return weights.config


def tokenizer_sizes(weights: Weights) -> dict[str, Any]:
    """``KronosModel`` hyperparameters from a released tokenizer's config (and ``features``: its ``d_in``).

    Raises:
        WeightsError: the config lacks a size, or its encoder and decoder differ in depth.
    """
    config = _config(weights, TOKENIZER_KEYS, "tokenizer weights")
    if config["n_enc_layers"] != config["n_dec_layers"]:
        raise WeightsError(f"tokenizer weights '{weights.source}': an encoder of {config['n_enc_layers']} and a decoder "
                           f"of {config['n_dec_layers']} layers; Twinkle's tokenizer has one depth for both")
    return {"tokenizer_d_model": config["d_model"], "tokenizer_heads": config["n_heads"],
            "tokenizer_ff_dim": config["ff_dim"], "tokenizer_layers": config["n_enc_layers"] - 1,
            "s1_bits": config["s1_bits"], "s2_bits": config["s2_bits"], "features": config["d_in"]}


def predictor_sizes(weights: Weights) -> dict[str, Any]:
    """``KronosModel`` hyperparameters from a released predictor's config.

    Raises:
        WeightsError: the config lacks a size.
    """
    config = _config(weights, PREDICTOR_KEYS, "weights")
    return {"d_model": config["d_model"], "n_heads": config["n_heads"], "n_layers": config["n_layers"],
            "ff_dim": config["ff_dim"], "s1_bits": config["s1_bits"], "s2_bits": config["s2_bits"]}


def released_sizes(weights: Weights | None, tokenizer: Weights | None) -> dict[str, Any]:
    """The sizes both configs set (a folder without config sets none), checked to agree.

    Raises:
        HyperparameterError: the predictor's and the tokenizer's subtoken bits differ.
    """
    sizes: dict[str, Any] = {}
    if tokenizer is not None and tokenizer.config:
        sizes.update(tokenizer_sizes(tokenizer))
    if weights is not None and weights.config:
        own = predictor_sizes(weights)
        clash = [k for k in ("s1_bits", "s2_bits") if k in sizes and sizes[k] != own[k]]
        if clash:
            raise HyperparameterError(
                f"the predictor '{weights.source}' reads {own['s1_bits']}+{own['s2_bits']}-bit tokens, the tokenizer "
                f"'{tokenizer.source if tokenizer else ''}' writes {sizes['s1_bits']}+{sizes['s2_bits']}: give a "
                "tokenizer and predictor released together")
        sizes.update(own)
    return sizes


def _rename(name: str) -> str:
    """A released name → Twinkle's: a fixed time table (``time_emb.hour_embed.emb.weight``) → the learned one."""
    if name.startswith("time_emb.") and name.endswith(".emb.weight"):
        return name[: -len(".emb.weight")] + ".weight"
    return name


def load(tokenizer: nn.Module, predictor: nn.Module, weights: Weights | None,
         tokenizer_weights: Weights | None) -> WeightsReport:
    """Load the released predictor and tokenizer into a ``KronosNetwork``'s parts; one report for both, in the
    network's names (``tokenizer.…``, ``predictor.…``).

    Raises:
        WeightsMismatchError: a tensor that does not fit (the first differences listed).
    """
    parts = [(prefix, load_weights(module, found, rename=_rename, what=what))
             for prefix, module, found, what in (("tokenizer.", tokenizer, tokenizer_weights, "tokenizer weights"),
                                                 ("predictor.", predictor, weights, "weights"))
             if found is not None]
    report = WeightsReport(" and ".join(r.source for _, r in parts), " and ".join(sorted({r.format for _, r in parts})))
    for prefix, part in parts:
        report.matched += [prefix + n for n in part.matched]
        report.renamed.update({prefix + n: prefix + f for n, f in part.renamed.items()})
        report.fresh += [prefix + n for n in part.fresh]
        report.ignored += [prefix + n for n in part.ignored]
    if weights is None and tokenizer_weights is not None:
        report.notes.append("the predictor starts from scratch on the loaded tokenizer's tokens")
    if tokenizer_weights is None and weights is not None:
        report.notes.append("the tokenizer starts from scratch: the loaded predictor only fits tokens of the tokenizer "
                            "it was released with")
    return report


def _group_size(bits: int) -> int:
    """The reference quantiser's entropy group: the largest divisor of ``bits`` up to 9 (its default)."""
    return max(g for g in range(1, 10) if bits % g == 0)


def save_released(network: nn.Module, folder: str) -> tuple[str, str]:
    """Write a ``KronosNetwork`` as the released models are: ``folder/tokenizer`` and ``folder/predictor``, each a
    ``config.json`` of the reference's constructor arguments beside ``model.safetensors`` — what Twinkle's
    ``weights=``/``tokenizer_weights=`` and the reference's ``from_pretrained`` read. A predictor without timestamp
    embeddings is written with all-zero tables (the reference always adds them; zeros add nothing).

    Returns:
        The tokenizer's and the predictor's folder.
    """
    tokenizer, predictor = network.tokenizer, network.predictor
    first = tokenizer.encoder[0] if len(tokenizer.encoder) else tokenizer.decoder[0]
    bits = tokenizer.s1_bits + tokenizer.s2_bits
    dropouts = {"ffn_dropout_p": 0.0, "attn_dropout_p": 0.0, "resid_dropout_p": 0.0}
    d_model = predictor.embedding.d_model
    block = predictor.transformer[0]
    parts = {
        "tokenizer": ({"d_in": tokenizer.features, "d_model": tokenizer.embed.out_features,
                       "n_heads": first.self_attn.n_heads, "ff_dim": first.ffn.w1.out_features,
                       "n_enc_layers": len(tokenizer.encoder) + 1, "n_dec_layers": len(tokenizer.decoder) + 1,
                       **dropouts, "s1_bits": tokenizer.s1_bits, "s2_bits": tokenizer.s2_bits, "beta": 0.05,
                       "gamma0": 1.0, "gamma": 1.1, "zeta": 0.05, "group_size": _group_size(bits)},
                      dict(tokenizer.state_dict())),
        "predictor": ({"s1_bits": tokenizer.s1_bits, "s2_bits": tokenizer.s2_bits,
                       "n_layers": len(predictor.transformer), "d_model": d_model,
                       "n_heads": block.self_attn.n_heads, "ff_dim": block.ffn.w1.out_features, **dropouts,
                       "token_dropout_p": 0.0, "learn_te": True}, dict(predictor.state_dict())),
    }
    if predictor.time_emb is None:
        from twinkle_timeseries.kronos.predictor import TemporalEmbedding

        parts["predictor"][1].update({f"time_emb.{name}.weight": torch.zeros(size, d_model)
                                      for name, size in TemporalEmbedding.FIELDS})
    written = []
    for part, (config, state) in parts.items():
        path = posixpath.join(folder.rstrip("/"), part)
        tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
        atomic_write_bytes(posixpath.join(path, "model.safetensors"), save(tensors))
        atomic_write_bytes(posixpath.join(path, "config.json"), json.dumps(config, indent=2).encode())
        written.append(path)
    return written[0], written[1]
