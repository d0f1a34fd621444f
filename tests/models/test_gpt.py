"""GPT: sizes, tied weights, label smoothing, top-p generation with context cropping, and
its attention kernels (the same math)."""

from __future__ import annotations

import pytest
import torch
from _tiny_models import TINY

from autotune.models import get_model
from autotune.models._common import _sample_top_p, generate

SPEC = TINY["gpt"].spec


@pytest.mark.parametrize(
    ("name", "d", "layers", "vocab"),
    [("gpt-small", 256, 2, 10_000), ("gpt-large", 512, 6, 50_000), ("gpt2-124m", 768, 12, 50_304)],
)
def test_sizes_match_their_shapes(name: str, d: int, layers: int, vocab: int) -> None:
    spec = get_model(name)
    hidden = 64 * -(-8 * d // (3 * 64))  # SwiGLU width, 8/3 d rounded up to 64
    per_layer = 4 * d * d + 3 * d * hidden + 2 * d  # qkv + proj, 3 MLP matrices, 2 norms
    counts = spec.param_counts()
    assert counts.non_embedding == layers * per_layer + d
    assert counts.total == counts.non_embedding + vocab * d + spec.max_seq_len * d  # tied head


def test_gpt2_124m_flops_match_nanogpt() -> None:
    spec = get_model("gpt2-124m")
    n = spec.param_counts().total - 1024 * 768  # nanoGPT: all params but the positions
    expected = 6 * n * 1024 + 12 * 12 * 768 * 1024 * 1024
    assert spec.flops_per_sample(1024) == pytest.approx(expected)
    assert spec.flops_per_sample(1024) / spec.tokens_per_sample(1024) == pytest.approx(
        854.77e6, rel=1e-3
    )


def test_output_projection_is_tied_to_the_embedding() -> None:
    model = SPEC.build()
    names = [n for n, _ in model.named_parameters()]
    assert not any("head" in n for n in names)
    model.tok_emb.weight.data.zero_()
    logits = model(torch.zeros(1, 4, dtype=torch.long))
    assert torch.count_nonzero(logits) == 0


def test_label_smoothing_is_used_in_the_loss() -> None:
    batch = SPEC.make_batch(batch_size=2, seq_len=8)
    torch.manual_seed(0)
    plain = SPEC.build()
    smooth = SPEC.build(label_smoothing=0.2)
    smooth.load_state_dict(plain.state_dict())
    with torch.no_grad():
        for p in (plain.tok_emb.weight, smooth.tok_emb.weight):
            p.mul_(50.0)  # confident predictions, where smoothing matters
    assert SPEC.loss(smooth, batch).item() != pytest.approx(
        SPEC.loss(plain, batch).item(), rel=1e-3
    )
    # the metric reports the plain (unsmoothed) loss either way
    metric = SPEC.extras["metric"]
    assert metric(smooth, batch)["loss"] == pytest.approx(metric(plain, batch)["loss"], rel=1e-5)
    with pytest.raises(ValueError, match="label_smoothing"):
        SPEC.build(label_smoothing=1.5)


def test_generate_shapes_cropping_modes_and_seeding() -> None:
    torch.manual_seed(0)
    model = SPEC.build()
    seen: list[int] = []
    model.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[1]))
    prompt = torch.randint(0, 64, (1, 30))
    a = generate(model, prompt, 6, 0.9, torch.Generator().manual_seed(1))
    b = generate(model, prompt, 6, 0.9, torch.Generator().manual_seed(1))
    assert a.shape == (1, 36) and torch.equal(a, b)
    assert torch.equal(a[:, :30], prompt)
    assert max(seen) == SPEC.args["max_seq_len"] == 32  # cropped once it grew past 32
    assert a.is_inference(), "generation runs under torch.inference_mode"
    assert model.training, "the previous mode is restored"
    with pytest.raises(ValueError, match="top_p"):
        generate(model, prompt, 1, 0.0)


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    gen = torch.Generator().manual_seed(0)
    draws = {int(_sample_top_p(probs, 0.7, gen)) for _ in range(200)}
    assert draws == {0, 1}  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7: the nucleus is {0, 1}
    assert {int(_sample_top_p(probs, 1e-6, gen)) for _ in range(20)} == {0}  # greedy


def test_attention_kernels_give_the_same_outputs_and_gradients() -> None:
    batch = SPEC.make_batch(batch_size=2, seq_len=16, generator=torch.Generator().manual_seed(0))
    results = []
    for kernel in SPEC.knob("attention").values:
        torch.manual_seed(0)
        model = SPEC.build(knobs={"attention": kernel})
        SPEC.loss(model, batch).backward()
        results.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (fused, eager) = results
    assert fused.keys() == eager.keys() and fused
    for name, grad in eager.items():
        torch.testing.assert_close(grad, fused[name], rtol=1e-5, atol=1e-6, msg=name)
