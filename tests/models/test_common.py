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


@pytest.mark.parametrize("model", ["mu", "gpt-small", "text-regressor"])
@pytest.mark.parametrize("bad", [-3, 1.5, True, 0])
def test_a_built_in_model_refuses_a_size_that_is_not_a_positive_integer(
    model: str, bad: object
) -> None:
    """``n_layers=-3`` built a model of no layers, which trained, raced and was written to
    a preset as the fastest config; 0 divided by zero in its init."""
    from autotune.contract.spec import user_code
    from autotune.core.errors import ModelLoadError
    from autotune.models import get_model

    spec = get_model(model).with_args(n_layers=bad)
    if (model, bad) == ("text-regressor", 0):  # its pooled embeddings and numeric path
        assert spec.param_counts().total > 0
        return
    with pytest.raises(ModelLoadError) as refused, user_code(spec, "build_fn"):
        spec.param_counts()
    message = str(refused.value)
    assert message.startswith(f"model {model!r} refused its arguments: ValueError: ")
    assert f", got {bad!r}" in message and "n_layers must be a " in message
    assert "--model-arg values" in message
    assert "fix build_fn" not in message  # a user of a built-in model cannot


@pytest.mark.parametrize(
    ("model", "arg"),
    [("mu", "n_layers"), ("gpt-small", "n_layers"), ("text-regressor", "n_layers"),
     ("pointer-gen", "enc_layers")],
)  # fmt: skip
def test_a_layer_count_past_any_real_model_is_refused_before_it_is_built(
    model: str, arg: str
) -> None:
    """A preset with ``n_layers: 10**12`` had train build layers for minutes on end."""
    from autotune.contract.spec import user_code
    from autotune.core.errors import ModelLoadError
    from autotune.models import get_model

    spec = get_model(model).with_args(**{arg: 10**12})
    with (
        pytest.raises(ModelLoadError, match=f"{arg} must be at most 4096"),
        user_code(spec, "build_fn"),
    ):
        spec.param_counts()
    assert get_model(model).with_args(**{arg: 2}).param_counts().total > 0


def test_a_smaller_max_seq_len_is_the_specs_limit_and_default_too() -> None:
    """``--model-arg max_seq_len=64`` for mu: every trial ran at the spec's default 128,
    which the model built with 64 refused."""
    from autotune.models import get_model

    mu = get_model("mu")
    assert (mu.seq_len, mu.max_seq_len) == (128, 512)
    short = mu.with_args(max_seq_len=64)
    assert (short.seq_len, short.max_seq_len, short.args["max_seq_len"]) == (64, 64, 64)
    longer = mu.with_args(max_seq_len=1024)
    assert (longer.seq_len, longer.max_seq_len) == (128, 1024)
    assert mu.with_args(n_layers=2).max_seq_len == 512


def test_only_a_refused_value_is_blamed_on_the_arguments() -> None:
    """The trainer's set-up runs under the same ``user_code`` as the build (moving the
    model, float8 layers): a missing library there is no argument of the user's."""
    import dataclasses

    from autotune.contract.spec import builds_our_code, user_code
    from autotune.core.errors import ModelLoadError
    from autotune.models import get_model

    def needs_torchao(**_: object) -> torch.nn.Module:
        raise ImportError("no module named 'torchao'")

    mu = get_model("mu")
    assert builds_our_code(mu) and builds_our_code(dataclasses.replace(mu, source="hf:llama"))
    assert not builds_our_code(dataclasses.replace(mu, source="my/model.py:spec"))
    assert not builds_our_code(dataclasses.replace(mu, source=""))  # made in Python
    broken = dataclasses.replace(mu, build_fn=needs_torchao)
    with pytest.raises(ModelLoadError) as failed, user_code(broken, "build_fn"):
        broken.build()
    assert "its build_fn failed: ImportError" in str(failed.value)
    assert "refused its arguments" not in str(failed.value)
