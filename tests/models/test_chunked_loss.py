"""The chunked loss: F.cross_entropy's loss and gradients, without the whole logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _tiny_models import TINY

from autotune.models._chunked_loss import chunk_rows, chunked_linear_cross_entropy
from autotune.models._common import IGNORE_INDEX


def _inputs(rows: int = 700, width: int = 24, vocab: int = 1_000) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, width, generator=gen).requires_grad_()
    weight = (0.2 * torch.randn(vocab, width, generator=gen)).requires_grad_()
    labels = torch.randint(0, vocab, (rows,), generator=gen)
    labels[::5] = IGNORE_INDEX  # padding the loss skips
    return hidden, weight, labels


def _loss_and_grads(fn, hidden, weight, *, dtype=None):  # type: ignore[no-untyped-def]
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = fn()
    (2.5 * loss).backward()  # an outer factor reaches both gradients
    return loss.detach(), hidden.grad.clone(), weight.grad.clone()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_and_gradients_match_cross_entropy_in_fp32(smoothing: float) -> None:
    hidden, weight, labels = _inputs()
    kw = {"ignore_index": IGNORE_INDEX, "label_smoothing": smoothing}
    full = _loss_and_grads(
        lambda: F.cross_entropy(F.linear(hidden, weight).float(), labels, **kw), hidden, weight
    )
    chunked = _loss_and_grads(
        lambda: chunked_linear_cross_entropy(hidden, weight, labels, **kw), hidden, weight
    )
    for want, got in zip(full, chunked, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_under_bf16_autocast_it_stays_near_the_full_projection() -> None:
    hidden, weight, labels = _inputs()
    full = _loss_and_grads(
        lambda: F.cross_entropy(F.linear(hidden, weight).float(), labels),
        hidden,
        weight,
        dtype=torch.bfloat16,
    )
    chunked = _loss_and_grads(
        lambda: chunked_linear_cross_entropy(hidden, weight, labels),
        hidden,
        weight,
        dtype=torch.bfloat16,
    )
    assert chunked[1].dtype == hidden.dtype and chunked[2].dtype == weight.dtype
    torch.testing.assert_close(chunked[0], full[0], rtol=1e-3, atol=1e-3)
    for want, got in zip(full[1:], chunked[1:], strict=True):  # bf16 matmuls both ways
        assert (got - want).abs().max() <= 0.02 * want.abs().max()


def test_without_gradients_it_computes_the_loss_only() -> None:
    hidden, weight, labels = _inputs()
    with torch.no_grad():
        loss = chunked_linear_cross_entropy(hidden, weight, labels)
        want = F.cross_entropy(F.linear(hidden, weight), labels)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, want)


def test_all_rows_ignored_gives_nan_as_cross_entropy_does() -> None:
    hidden, weight, labels = _inputs(rows=8)
    labels[:] = IGNORE_INDEX
    assert torch.isnan(chunked_linear_cross_entropy(hidden, weight, labels))
    assert torch.isnan(F.cross_entropy(F.linear(hidden, weight), labels))


def test_a_chunk_holds_about_hidden_s_size_of_logits() -> None:
    assert chunk_rows(8 * 1024, 768, 50_304) == 256  # GPT-2: 125 rows wanted, the floor
    assert chunk_rows(32 * 1024, 768, 50_304) == 512  # 489 rounded up to a power of two
    assert chunk_rows(100, 768, 50_304) == 100  # never more than there are
    assert chunk_rows(4_096, 4_096, 1_000) == 4_096  # a small vocabulary: one chunk


@pytest.mark.parametrize("family", ["mu", "gpt"])
def test_the_loss_knob_keeps_the_model_s_loss_and_gradients(family: str) -> None:
    tiny = TINY[family]
    batch = tiny.spec.make_batch(batch_size=tiny.batch_size, seq_len=tiny.seq_len)
    results = []
    for loss in ("full", "chunked"):
        torch.manual_seed(0)
        model = tiny.spec.build(knobs={"loss": loss})
        value = tiny.spec.loss(model, batch)
        value.backward()
        results.append((value.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, full_grads), (chunked, chunked_grads) = results
    torch.testing.assert_close(chunked, full)
    for want, got in zip(full_grads, chunked_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    with torch.no_grad():  # no labels: the logits, whatever the knob
        model = tiny.spec.build(knobs={"loss": "chunked"})
        assert model(batch["input_ids"]).shape[-1] == model.tok_emb.weight.shape[0]


def test_an_unknown_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="loss must be one of"):
        TINY["gpt"].spec.build_fn(**{**TINY["gpt"].spec.args, "loss": "fused"})


def test_under_fp16_the_gradient_is_not_flushed_to_zero() -> None:
    """The gradient is cast to fp16 before its division by the rows counted: with 4,096
    rows, dividing first puts many of its entries below fp16's smallest (the full loss
    without a GradScaler flushes some of hidden's gradients to exactly 0 here)."""
    hidden, weight, labels = _inputs(rows=4_096, width=32, vocab=2_000)
    want = _loss_and_grads(
        lambda: F.cross_entropy(F.linear(hidden, weight), labels), hidden, weight
    )
    got = _loss_and_grads(
        lambda: chunked_linear_cross_entropy(hidden, weight, labels),
        hidden,
        weight,
        dtype=torch.float16,
    )
    counted = labels != IGNORE_INDEX  # the ignored rows' gradients are 0 by right
    assert int((want[1][counted] == 0).sum()) == int((got[1][counted] == 0).sum()) == 0
    for ref, half in zip(want[1:], got[1:], strict=True):
        assert (half - ref).abs().max() <= 0.01 * ref.abs().max()


def test_under_torch_compile_the_chunked_loss_runs_eagerly() -> None:
    """Traced by the compiler the model imports the loss in its forward and skips it
    (``torch.compiler.disable``): it runs eagerly, as the loss's docstring says."""
    tiny = TINY["gpt"]
    batch = tiny.spec.make_batch(batch_size=tiny.batch_size, seq_len=tiny.seq_len)
    model = tiny.spec.build(knobs={"loss": "chunked"})
    explained = torch._dynamo.explain(model)(batch["input_ids"], batch["labels"])
    reasons = [reason.reason for reason in explained.break_reasons]
    assert any(
        "torch.compiler.disable" in r and "chunked_linear_cross_entropy" in r for r in reasons
    ), reasons
