"""The pieces models share: both attention kernels compute the same causal attention."""

from __future__ import annotations

import pytest
import torch

from autotune.models._common import causal_attention


def _attention_and_grads(
    kernel: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    y = causal_attention(q, k, v, impl=kernel)
    grads = torch.autograd.grad(y.float().square().sum(), (q, k, v))
    return (y, *grads)


def test_eager_attention_matches_the_fused_kernel_in_fp32() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=g) for _ in range(3))
    fused = _attention_and_grads("sdpa", q, k, v)
    eager = _attention_and_grads("eager", q, k, v)
    for a, b in zip(eager, fused, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_both_kernels_in_bf16_stay_near_the_fp32_result() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=g) for _ in range(3))
    reference = _attention_and_grads("sdpa", q, k, v)
    for kernel in ("sdpa", "eager"):
        low = _attention_and_grads(kernel, *(t.bfloat16() for t in (q, k, v)))
        for a, b in zip(low, reference, strict=True):
            torch.testing.assert_close(a.float(), b, rtol=5e-2, atol=5e-2, msg=kernel)


def test_an_unknown_kernel_is_refused() -> None:
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="attention must be one of"):
        causal_attention(q, q, q, impl="flash")
