"""Count-based baselines a language model must beat on the same tokens: unigram and bigram perplexity.

They predict exactly the tokens the model is scored on (every label of the packed validation windows, from the
token before it), with counts from the training windows only. The bigram interpolates with the add-one unigram;
its weight is the best of a grid on the validation tokens themselves — the baseline at its strongest."""

from __future__ import annotations

import math

import numpy as np
import torch

from twinkle_llm.data import IGNORE


def _pairs(dataset: torch.utils.data.TensorDataset) -> tuple[np.ndarray, np.ndarray]:
    """(previous token, predicted token) of every label in ``(input_ids, labels, ...)`` windows."""
    ids, labels = dataset.tensors[0], dataset.tensors[1]
    prev, nxt = ids[:, :-1].reshape(-1), labels[:, 1:].reshape(-1)
    keep = nxt != IGNORE
    return prev[keep].numpy(), nxt[keep].numpy()


def unigram_perplexity(train: torch.utils.data.TensorDataset, val: torch.utils.data.TensorDataset,
                       vocab_size: int) -> float:
    """The perplexity of add-one unigram counts of the training labels on the validation labels."""
    _, targets = _pairs(train)
    counts = np.bincount(targets, minlength=vocab_size).astype(np.float64) + 1.0
    probs = counts / counts.sum()
    _, val_targets = _pairs(val)
    return float(math.exp(-np.log(probs[val_targets]).mean()))


def bigram_perplexity(train: torch.utils.data.TensorDataset, val: torch.utils.data.TensorDataset,
                      vocab_size: int) -> float:
    """The perplexity of an interpolated bigram (training counts) on the validation labels, at its best weight."""
    prev, targets = _pairs(train)
    unigram = np.bincount(targets, minlength=vocab_size).astype(np.float64) + 1.0
    unigram /= unigram.sum()
    keys = prev.astype(np.int64) * vocab_size + targets
    uniq, counts = np.unique(keys, return_counts=True)
    pair_counts = dict(zip(uniq.tolist(), counts.tolist()))
    context = np.bincount(prev, minlength=vocab_size).astype(np.float64)
    val_prev, val_targets = _pairs(val)
    val_keys = val_prev.astype(np.int64) * vocab_size + val_targets
    seen = np.array([pair_counts.get(k, 0) for k in val_keys.tolist()], dtype=np.float64)
    ctx = context[val_prev]
    ml = np.divide(seen, ctx, out=np.zeros_like(seen), where=ctx > 0)
    uni = unigram[val_targets]
    best = math.inf
    for weight in np.linspace(0.05, 0.95, 19):
        probs = weight * ml + (1 - weight) * uni
        best = min(best, float(math.exp(-np.log(probs).mean())))
    return best
