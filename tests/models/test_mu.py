"""MU: its knobs (block grouping, the attention kernel) are math-preserving, 17 attentions per
layer, the 8x8 grid layout."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from _tiny_models import TINY

from autotune.models import get_model
from autotune.models.mu import BLOCK_NAMES, MU, to_grid

SPEC = TINY["mu"].spec


def _batch(seq_len: int = 16) -> dict[str, torch.Tensor]:
    return SPEC.make_batch(
        batch_size=2, seq_len=seq_len, generator=torch.Generator().manual_seed(0)
    )


def test_every_knob_combination_gives_the_same_outputs_and_gradients() -> None:
    batch = _batch()
    reference = None
    groups, kernels = SPEC.knob("block_group").values, SPEC.knob("attention").values
    assert set(kernels) == {"sdpa", "eager"}
    for group, kernel in itertools.product(groups, kernels):
        torch.manual_seed(0)
        model = SPEC.build(knobs={"block_group": group, "attention": kernel})
        logits = model(batch["input_ids"])
        loss = SPEC.loss(model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        if reference is None:
            reference = (logits, grads)
            continue
        torch.testing.assert_close(logits, reference[0], rtol=1e-5, atol=1e-6)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, reference[1][name], rtol=1e-5, atol=1e-6, msg=name)


def test_knobs_reject_values_outside_them() -> None:
    with pytest.raises(ValueError, match="block_group"):
        SPEC.build(knobs={"block_group": 3})
    with pytest.raises(ValueError, match="attention"):
        SPEC.build(knobs={"attention": "flash"})


def test_eager_attention_runs_no_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> torch.Tensor:
        raise AssertionError("the eager kernel called scaled_dot_product_attention")

    monkeypatch.setattr(F, "scaled_dot_product_attention", refuse)
    model = SPEC.build(knobs={"attention": "eager"})
    assert model(_batch()["input_ids"]).shape[-1] == SPEC.args["vocab_size"]
    with pytest.raises(AssertionError, match="eager kernel"):
        SPEC.build(knobs={"attention": "sdpa"})(_batch()["input_ids"])


@pytest.mark.parametrize("group", [1, 4, 16])
def test_each_layer_runs_16_block_attentions_plus_one_cross_block(
    group: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, ...]] = []
    real = F.scaled_dot_product_attention

    def counting(q: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(tuple(q.shape))
        return real(q, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model = SPEC.build(knobs={"block_group": group})
    model(_batch()["input_ids"])
    n_layers = SPEC.args["n_layers"]
    assert len(calls) == n_layers * (16 // group + 1)
    heads_attended = sum(shape[1] for shape in calls)  # blocks (or heads) per call
    assert heads_attended == n_layers * (16 + SPEC.args["n_heads"])


def test_hidden_state_is_an_8x8_grid_of_16_named_2x2_blocks() -> None:
    assert len(BLOCK_NAMES) == 16 and len(set(BLOCK_NAMES)) == 16
    cell_dim = 3
    h = torch.arange(64 * cell_dim).float()  # block-major: block k owns [12k, 12k + 12)
    grid = to_grid(h, cell_dim)  # (8, 8, cell_dim)
    assert grid.shape == (8, 8, cell_dim)
    block_of = grid[..., 0].long() // (4 * cell_dim)  # (8, 8): which block each cell is in
    for k in range(16):
        rows, cols = torch.nonzero(block_of == k, as_tuple=True)
        assert sorted(set(rows.tolist())) == [2 * (k // 4), 2 * (k // 4) + 1], BLOCK_NAMES[k]
        assert sorted(set(cols.tolist())) == [2 * (k % 4), 2 * (k % 4) + 1], BLOCK_NAMES[k]


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_it_is_causal(kernel: str) -> None:
    torch.manual_seed(0)
    model = SPEC.build(knobs={"attention": kernel})
    ids = _batch()["input_ids"]
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % SPEC.args["vocab_size"]
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_too_long_a_sequence_is_refused() -> None:
    model = SPEC.build()
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, SPEC.args["max_seq_len"] + 1, dtype=torch.long))


def test_flops_follow_the_palm_formula() -> None:
    spec = get_model("mu")
    d, L, T, V = 256, spec.args["n_layers"], 128, spec.args["vocab_size"]
    n = spec.param_counts().non_embedding + V * d  # the tied head is a matmul per token
    assert spec.flops_per_sample(T) == pytest.approx(6 * n * T + 12 * L * (2 * d) * T**2)


def test_generate_crops_the_context_and_returns_new_tokens() -> None:
    torch.manual_seed(0)
    model = SPEC.build()
    assert isinstance(model, MU)
    seen: list[int] = []
    model.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[1]))
    prompt = torch.randint(0, SPEC.args["vocab_size"], (1, 40))  # longer than max_seq_len 32
    out = SPEC.extras["generate"](model, prompt, 5, 0.9, torch.Generator().manual_seed(0))
    assert out.shape == (1, 45)
    assert torch.equal(out[:, :40], prompt)
    assert seen and max(seen) <= SPEC.args["max_seq_len"]
