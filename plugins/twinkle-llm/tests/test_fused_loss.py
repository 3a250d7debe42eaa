"""The fused, chunked LM-head cross-entropy (issue 51): the same loss and the same gradients as the head's logits
followed by PyTorch's cross-entropy — in fp32 and under bf16 autocast, with ignored positions, tied and untied
heads, a bias — while the whole vocabulary's logits are never materialised; and the algorithm uses it by default
where it applies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from twinkle_llm.fused_loss import chunk_tokens, fused_linear_cross_entropy


def _reference(hidden: torch.Tensor, head: nn.Linear, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(head(hidden).float(), targets, ignore_index=-100, reduction="sum")


@pytest.mark.parametrize("bias", [False, True])
def test_the_fused_loss_and_its_gradients_equal_the_logits_path_in_fp32(bias: bool) -> None:
    """Loss, hidden-state and head gradients agree with the unfused path (chunks of 7 tokens over 40, a quarter of
    the targets ignored, a scaled upstream gradient)."""
    torch.manual_seed(0)
    head = nn.Linear(16, 50, bias=bias)
    hidden = torch.randn(40, 16, requires_grad=True)
    targets = torch.randint(0, 50, (40,))
    targets[::4] = -100
    fused = fused_linear_cross_entropy(hidden, head, targets, chunk=7)
    (fused * 0.5).backward()
    grads = hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone() if bias else None
    hidden.grad, head.weight.grad = None, None
    if bias:
        head.bias.grad = None
    expected = _reference(hidden, head, targets)
    (expected * 0.5).backward()
    assert torch.allclose(fused, expected, rtol=1e-5)
    assert torch.allclose(grads[0], hidden.grad, atol=1e-6) and torch.allclose(grads[1], head.weight.grad, atol=1e-5)
    if bias:
        assert torch.allclose(grads[2], head.bias.grad, atol=1e-5)


def test_under_bf16_autocast_it_computes_the_logits_as_the_head_would() -> None:
    """Under bf16 autocast the chunk's logits are bf16 products (as the head's), the softmax fp32: the loss within
    bf16's rounding of the unfused one, the gradients too; a frozen head gets none."""
    torch.manual_seed(1)
    head = nn.Linear(32, 300, bias=False).requires_grad_(False)
    hidden = torch.randn(64, 32, requires_grad=True)
    targets = torch.randint(0, 300, (64,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = fused_linear_cross_entropy(hidden, head, targets, chunk=10)
    fused.backward()
    grad = hidden.grad.clone()
    hidden.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = _reference(hidden, head, targets)
    expected.backward()
    assert torch.allclose(fused, expected, rtol=1e-3) and head.weight.grad is None
    assert torch.allclose(grad, hidden.grad, atol=2e-2 * float(hidden.grad.abs().max()))


def test_only_labelled_positions_are_computed() -> None:
    """The head's products run over the labelled positions alone (counted by torch's FLOP counter, not timed): with
    three of four targets ignored — a prompt's tokens in instruction tuning — a quarter of the work; without
    gradients (validation) a third; and the same loss and hidden-state gradient as the logits path, zero at the
    ignored positions."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(2)
    head = nn.Linear(16, 50, bias=False)
    hidden = torch.randn(40, 16, requires_grad=True)
    every = torch.randint(0, 50, (40,))
    some = every.clone()
    some[torch.arange(40) % 4 != 0] = -100

    def flops(targets: torch.Tensor) -> int:
        with FlopCounterMode(display=False) as counter:
            fused_linear_cross_entropy(hidden, head, targets, chunk=8).backward()
        hidden.grad, head.weight.grad = None, None
        return counter.get_total_flops()

    assert flops(some) * 4 == flops(every)
    with FlopCounterMode(display=False) as counter, torch.no_grad():  # validation: the loss's products alone
        fused_linear_cross_entropy(hidden, head, every, chunk=8)
    assert counter.get_total_flops() * 3 == flops(every)  # logits; and in training the two gradients
    fused = fused_linear_cross_entropy(hidden, head, some)
    fused.backward()
    grad = hidden.grad.clone()
    hidden.grad, head.weight.grad = None, None
    expected = _reference(hidden, head, some)
    expected.backward()
    assert torch.allclose(fused, expected, rtol=1e-5) and torch.allclose(grad, hidden.grad, atol=1e-6)
    assert not grad[torch.arange(40) % 4 != 0].any()


def test_chunks_hold_a_bounded_share_of_the_vocabulary() -> None:
    """A chunk's fp32 logits take at most 128 MiB (Qwen3's 151,936 words: 220 tokens), 64 tokens at least."""
    assert chunk_tokens(151_936) == 220 and chunk_tokens(10**9) == 64 and chunk_tokens(256) == 131_072


def test_the_algorithm_trains_through_the_fused_head_with_the_same_loss(pretrained) -> None:
    """llm-tiny's batch loss through the fused head equals its logits path's (fused_loss=False), with tied
    embeddings' gradient the same; LoRA-adapted heads and split logits fall back to the logits."""
    trainer, _ = pretrained
    algorithm = trainer.algorithm
    ids = torch.randint(0, 1024, (2, 48), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :5] = -100  # a prompt's tokens are not predicted
    batch = (ids, labels)
    algorithm.train()
    head = algorithm.fused_head()
    assert head is not None and algorithm.fused_loss
    fused = algorithm.batch_loss(batch)
    fused.backward()
    grad = {n: p.grad.clone() for n, p in algorithm.named_parameters() if p.grad is not None}
    algorithm.zero_grad(set_to_none=True)
    algorithm.fused_loss = False
    try:
        plain = algorithm.batch_loss(batch)
        plain.backward()
    finally:
        algorithm.fused_loss = True
    assert torch.allclose(fused, plain, rtol=1e-4)
    for name, p in algorithm.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grad[name], p.grad, atol=1e-5 + 1e-3 * float(p.grad.abs().max())), name
    algorithm.zero_grad(set_to_none=True)
    algorithm.eval()
