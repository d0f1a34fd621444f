"""The output projection and cross-entropy in chunks of rows: the logits are never whole.

A language model's last step, ``cross_entropy(hidden @ weight.T, labels)``, holds the
logits of every token, (B*T, V), and in training their gradient too: at GPT-2's vocabulary
(50,304) and 8 sequences of 1,024 tokens, 1.65 GB each in fp32, more than the rest of the
activations. ``chunked_linear_cross_entropy`` computes the same mean loss a chunk of rows
at a time and, in training, the gradients of ``hidden`` and ``weight`` in the same pass
(as Liger's fused linear cross-entropy does, in plain torch): it keeps one chunk's logits
and the two gradients, (B*T, C) and (V, C), instead of (B*T, V).

The math is ``F.cross_entropy`` with ``ignore_index`` and ``label_smoothing`` (the mean over
the rows not ignored): ``d loss / d logits = softmax - (1 - eps) onehot - eps / V``, divided
by the number of rows counted. The matmuls run in the autocast dtype where autocast is on
(as the full projection's do) and the softmax in fp32; the gradient is formed unscaled by
that count and divided after the matmuls, so fp16 does not flush it to zero. Under
``torch.compile`` the function runs eagerly (a graph break): traced by the compiler, it ran
gpt-small 1.04x faster but held 855 MB against the full loss's 555 MB (BENCHMARKS.md).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["chunk_rows", "chunked_linear_cross_entropy"]


def chunk_rows(n_rows: int, width: int, vocab: int, *, floor: int = 256) -> int:
    """Rows per chunk: a chunk's logits about the size of ``hidden`` itself (at least
    ``floor`` rows, so each matmul stays large; at most all of them), a power of two."""
    want = max(floor, math.ceil(n_rows * width / max(vocab, 1)))
    return min(n_rows, 1 << (want - 1).bit_length())


def _chunk_loss(
    logits: torch.Tensor, labels: torch.Tensor, ok: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the chunk's summed loss over counted rows, logsumexp per row); logits are fp32."""
    lse = torch.logsumexp(logits, dim=-1)  # (n,)
    target = logits.gather(1, labels[:, None]).squeeze(1)
    rows = lse - target
    if eps:
        rows = (1.0 - eps) * rows + eps * (lse - logits.mean(dim=-1))
    return torch.where(ok, rows, 0.0).sum(), lse


def _chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    ignore_index: int,
    eps: float,
    *,
    grads: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The mean loss and, with ``grads``, its gradients for ``hidden`` and ``weight``,
    computed a chunk of rows at a time."""
    n_rows, vocab = hidden.shape[0], weight.shape[0]
    dtype = _matmul_dtype(hidden)
    w = weight.to(dtype)  # once, where autocast would cast it for every chunk
    ok_all = labels != ignore_index
    count = ok_all.sum().to(torch.float32)  # 0 rows counted: nan, as F.cross_entropy
    safe_all = torch.where(ok_all, labels, 0)
    grad_hidden = torch.empty_like(hidden) if grads else None
    grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads else None
    total = hidden.new_zeros((), dtype=torch.float32)
    step = chunk_rows(n_rows, hidden.shape[1], vocab)
    for start in range(0, n_rows, step):
        h = hidden[start : start + step].to(dtype)
        ok, safe = ok_all[start : start + step], safe_all[start : start + step]
        logits = F.linear(h, w).float()  # (n, V): the only logits alive
        loss, lse = _chunk_loss(logits, safe, ok, eps)
        total += loss
        if grad_hidden is None or grad_weight is None:
            continue
        grad = logits.sub_(lse[:, None]).exp_()  # the softmax, in place
        grad.scatter_add_(1, safe[:, None], grad.new_full((len(safe), 1), eps - 1.0))
        if eps:
            grad.sub_(eps / vocab)
        grad = grad.mul_(ok[:, None]).to(dtype)  # unscaled by the count: no underflow
        grad_hidden[start : start + step] = (grad @ w).float() / count
        grad_weight += (grad.t() @ h).float()
    if grad_weight is not None:
        grad_weight = grad_weight.div_(count).to(weight.dtype)
    return total / count, grad_hidden, grad_weight


class _ChunkedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,  # (N, C)
        weight: torch.Tensor,  # (V, C)
        labels: torch.Tensor,  # (N,)
        ignore_index: int,
        eps: float,
    ) -> torch.Tensor:
        loss, grad_hidden, grad_weight = _chunked(
            hidden, weight, labels, ignore_index, eps, grads=True
        )
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_out, grad_weight * grad_out, None, None, None


def _matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype the projection's matmuls run in: autocast's where it is on."""
    kind = hidden.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype


@torch.compiler.disable
def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(hidden, weight).float(), labels, ...)``, mean reduction,
    without the whole (N, V) logits; ``hidden`` (..., C) and ``labels`` (...) are flattened.

    With gradients off (evaluation) only the loss is computed, chunk by chunk.
    """
    hidden = hidden.reshape(-1, hidden.shape[-1])
    labels = labels.reshape(-1)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        out: torch.Tensor = _ChunkedLinearCE.apply(
            hidden, weight, labels, ignore_index, label_smoothing
        )
        return out
    return _chunked(hidden, weight, labels, ignore_index, label_smoothing, grads=False)[0]
