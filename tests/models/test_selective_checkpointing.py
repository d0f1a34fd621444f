"""Selective activation checkpointing: the first of every k layers is checkpointed."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from _tiny_models import TINY
from torch import nn

from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.core.errors import ConfigError
from autotune.models import _common, get_model
from autotune.models._common import checkpoint_every_knob, run_layers
from autotune.testing.fake_caps import cpu_caps


def _checkpointed(every: int, n_layers: int, *, checkpointing: bool = True) -> list[int]:
    """Which layers ``run_layers`` hands to torch's checkpoint."""
    layers = [nn.Linear(4, 4) for _ in range(n_layers)]
    seen: list[int] = []

    def spy(layer, x, *extra, use_reentrant):  # type: ignore[no-untyped-def]
        seen.append(layers.index(layer))
        return layer(x, *extra)

    with mock.patch.object(_common, "checkpoint", spy):
        run_layers(layers, torch.ones(2, 4), checkpointing=checkpointing, every=every)
    return seen


def test_every_k_checkpoints_the_first_of_each_k_layers() -> None:
    assert _checkpointed(1, 6) == [0, 1, 2, 3, 4, 5]
    assert _checkpointed(2, 6) == [0, 2, 4]
    assert _checkpointed(4, 6) == [0, 4]
    assert _checkpointed(2, 6, checkpointing=False) == []


def test_the_knob_offers_the_steps_a_stack_has() -> None:
    assert checkpoint_every_knob(2).values == (1, 2)
    assert checkpoint_every_knob(12).values == (1, 2, 4)
    assert checkpoint_every_knob(12).only_with == "activation_checkpointing"


@pytest.mark.parametrize("family", ["mu", "gpt"])
def test_selective_checkpointing_keeps_the_gradients(family: str) -> None:
    tiny = TINY[family]
    batch = tiny.spec.make_batch(batch_size=tiny.batch_size, seq_len=tiny.seq_len)
    grads = []
    for checkpointing, every in ((False, 1), (True, 1), (True, 2)):
        torch.manual_seed(0)
        model = tiny.spec.build(
            activation_checkpointing=checkpointing, knobs={"checkpoint_every": every}
        )
        tiny.spec.loss(model, batch).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for other in grads[1:]:
        for want, got in zip(grads[0], other, strict=True):
            torch.testing.assert_close(got, want)


def test_a_step_below_one_is_refused() -> None:
    spec = TINY["gpt"].spec
    with pytest.raises(ValueError, match="checkpoint_every must be at least 1"):
        spec.build_fn(**{**spec.args, "checkpoint_every": 0})


def test_a_step_without_checkpointing_is_refused_as_doing_nothing() -> None:
    spec = get_model("gpt-small")
    config = TrainConfig(micro_batch=8, grad_accum=4, seq_len=256, knobs={"checkpoint_every": 2})
    with pytest.raises(ConfigError, match="checkpoint_every=2 does nothing without"):
        check_config(config, spec=spec, device=cpu_caps())
    check_config(config.replace(activation_checkpointing=True), spec=spec, device=cpu_caps())
    check_config(config.replace(knobs={"checkpoint_every": 1}), spec=spec, device=cpu_caps())


@pytest.mark.parametrize("family", ["mu", "gpt"])
@pytest.mark.parametrize("every", [1, 2])
def test_a_pinned_sdpa_kernel_is_pinned_in_the_recompute_too(family: str, every: int) -> None:
    """A checkpointed layer runs again in the backward pass, outside the forward's
    ``sdpa_backend_context``. On this CPU the default kernel is a fused one and a pinned
    ``math`` saves other tensors: unpinned in the recompute, checkpoint refused the step
    (``CheckpointError``), as a pinned cuDNN or memory-efficient kernel would on a GPU."""
    tiny = TINY[family]
    batch = tiny.spec.make_batch(batch_size=tiny.batch_size, seq_len=tiny.seq_len)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = tiny.spec.build(
            activation_checkpointing=checkpointing,
            knobs={"sdpa_backend": "math", "checkpoint_every": every},
        )
        tiny.spec.loss(model, batch).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for want, got in zip(*grads, strict=True):
        torch.testing.assert_close(got, want)
