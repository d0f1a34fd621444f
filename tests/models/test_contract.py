"""Every built-in family honours the ModelSpec contract (tiny sizes, CPU)."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny_models import TINY, Tiny

from autotune.models import get_model


def _batch(t: Tiny, seed: int = 0) -> dict[str, torch.Tensor]:
    return t.spec.make_batch(
        batch_size=t.batch_size, seq_len=t.seq_len, generator=torch.Generator().manual_seed(seed)
    )


def test_batch_is_seeded_batch_first_and_on_cpu(tiny: Tiny) -> None:
    a, b, c = _batch(tiny, 0), _batch(tiny, 0), _batch(tiny, 1)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].device.type == "cpu"
        assert a[key].shape[0] == tiny.batch_size, key
        assert torch.equal(a[key], b[key]), f"{key} differs for the same seed"
    assert any(not torch.equal(a[k], c[k]) for k in a), "different seeds gave the same batch"


def test_forward_backward_reaches_every_parameter(tiny: Tiny) -> None:
    torch.manual_seed(0)
    model = tiny.spec.build()
    loss = tiny.spec.loss(model, _batch(tiny))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"no gradient reached {missing}"
    assert sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None) > 0


def test_it_learns_a_fixed_batch(tiny: Tiny) -> None:
    torch.manual_seed(0)
    model = tiny.spec.build()
    batch = _batch(tiny)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = tiny.spec.loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0], (
        f"loss did not fall clearly: {losses[0]:.3f} -> {losses[-1]:.3f}"
    )


def test_checkpointing_gives_the_same_loss_and_gradients(tiny: Tiny) -> None:
    assert tiny.spec.supports_checkpointing
    torch.manual_seed(0)
    plain = tiny.spec.build(activation_checkpointing=False)
    ckpt = tiny.spec.build(activation_checkpointing=True)
    ckpt.load_state_dict(plain.state_dict())
    batch = _batch(tiny)
    loss_a, loss_b = tiny.spec.loss(plain, batch), tiny.spec.loss(ckpt, batch)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-6)
    grads_b = dict(ckpt.named_parameters())
    for name, p in plain.named_parameters():
        assert p.grad is not None and grads_b[name].grad is not None, name
        torch.testing.assert_close(grads_b[name].grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_checkpointing_really_saves_activation_memory(tiny: Tiny) -> None:
    """Fewer tensors are kept for backward with checkpointing on (counted by saved-tensor hooks)."""
    torch.manual_seed(0)
    batch = _batch(tiny)
    saved = {}
    for flag in (False, True):
        model = tiny.spec.build(activation_checkpointing=flag)
        total = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal total
            total += t.numel()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            tiny.spec.loss(model, batch)
        saved[flag] = total
    assert saved[True] < saved[False], saved


def test_bf16_autocast_runs(tiny: Tiny) -> None:
    """The search tries bf16 on CPUs that have it: every op must accept mixed dtypes."""
    torch.manual_seed(0)
    model = tiny.spec.build(activation_checkpointing=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = tiny.spec.loss(model, _batch(tiny))
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_flops_and_tokens_are_positive_and_grow_with_length(tiny: Tiny) -> None:
    spec = tiny.spec
    assert spec.flops_per_sample(8) > 0
    assert spec.flops_per_sample(16) > spec.flops_per_sample(8)
    tokens = spec.tokens_per_sample(16)
    assert tokens == (1 if spec.throughput_unit == "samples" else tokens) and tokens >= 1


def test_metric_hook_returns_finite_floats(tiny: Tiny) -> None:
    torch.manual_seed(0)
    model = tiny.spec.build()
    metrics = tiny.spec.extras["metric"](model, _batch(tiny))
    assert "loss" in metrics
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values()), metrics
    assert model.training, "the metric must leave the model in its previous mode"


@pytest.mark.slow
def test_torch_compile_traces_every_family(tiny: Tiny) -> None:
    """Dynamo + AOTAutograd (the whole compile front end, no C++ code generation)."""
    torch.manual_seed(0)
    model = tiny.spec.build()
    batch = _batch(tiny)
    eager = tiny.spec.loss(model, batch)
    compiled = torch.compile(model, backend="aot_eager")
    loss = tiny.spec.loss(compiled, batch)
    loss.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-4, atol=1e-5)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.slow
def test_torch_compile_inductor_runs_gpt() -> None:
    """The default backend (inductor, C++ code generation on CPU) end to end on one family."""
    t = TINY["gpt"]
    torch.manual_seed(0)
    model = t.spec.build(n_layers=1)
    batch = _batch(t)
    eager = t.spec.loss(model, batch)
    loss = t.spec.loss(torch.compile(model), batch)
    loss.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("mu", 6.7e6 * 0.85, 6.7e6 * 1.15),
        ("mu-24", 26.9e6 * 0.85, 26.9e6 * 1.15),
        ("gpt2-124m", 124e6 * 0.98, 124e6 * 1.02),
    ],
)
def test_named_sizes_are_in_their_stated_ranges(name: str, low: float, high: float) -> None:
    counts = get_model(name).param_counts()
    value = counts.non_embedding if name.startswith("mu") else counts.total
    assert low <= value <= high, f"{name}: {value:,} not in [{low:,.0f}, {high:,.0f}]"


def test_parameter_counts_tell_frozen_from_trained_and_count_shared_once() -> None:
    from torch import nn

    from autotune.contract.spec import count_parameters

    emb = nn.Embedding(10, 4)
    model = nn.Sequential(emb, nn.Linear(4, 10))
    model[1].weight = emb.weight  # tied: counted once
    model[1].bias.requires_grad_(False)  # frozen
    counts = count_parameters(model)
    assert (counts.total, counts.non_embedding, counts.trained) == (50, 10, 40)
