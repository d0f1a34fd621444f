"""The one build of what a step runs on: backend flags, the model, its wrapping and
compile, the optimizer and the step function (docs/design.md, "One build").

The burst that measures a config (``autotune.burst.trial``), the trainer that runs it
(``autotune.train.trainer``) and ``PresetLoop`` (``autotune.train.loop``) all build
through here, so what was measured is what is trained, built in the same order:

1. the process's numerics flags (``apply_backend_flags``: TF32, cuDNN autotuning), first,
   so that whatever compile traces runs under the flags the steps run under;
2. the model, as built by its spec (checkpointing, knobs) or as given, placed on the
   device (``prepare_model``/``place_model``: channels-last, float8 linears);
3. its wrapping for several processes (``wrap_model``: DDP or FSDP2; nothing on one);
4. ``torch.compile`` as the config says (``compile_model``);
5. the optimizer over the raw model's parameters (``make_optimizer``: fused per the
   config), after the wrapping because FSDP2 replaces the parameters with sharded ones;
6. the step function (``Stepper``), with the scheduler made from that optimizer.

The CUDA allocator's settings are not part of it: they must be set before CUDA starts,
which a burst does before it measures the CUDA context (``apply_allocator_settings``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.engine.step import (
    Stepper,
    apply_backend_flags,
    compile_model,
    make_optimizer,
    place_model,
    prepare_model,
)
from autotune.engine.wrapping import wrap_model

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec

__all__ = ["Built", "build_step_model", "build_training"]

LossFn = Callable[[nn.Module, "Batch"], torch.Tensor]
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]


@dataclass(frozen=True)
class Built:
    """What a run trains from: the model as built (``raw``: what a checkpoint holds and
    the trainer evaluates), the module the step runs (wrapped and compiled per the
    config), its optimizer and the step function."""

    raw: nn.Module
    model: nn.Module
    optimizer: torch.optim.Optimizer
    stepper: Stepper


def build_step_model(
    source: ModelSpec | nn.Module,
    config: TrainConfig,
    device: torch.device,
    *,
    world_size: int = 1,
    model_code: contextlib.AbstractContextManager[Any] | None = None,
) -> tuple[nn.Module, nn.Module]:
    """Steps 1-4 of the module docstring: the backend flags set, then ``(raw, model)``:
    the model built from its spec (or ``source`` itself) on ``device``, and the module a
    step runs (wrapped for ``world_size`` processes, compiled per the config).
    ``model_code`` is the context the model's own build runs under (the trainer's
    ``user_code``, which names a failing ``build_fn``)."""
    apply_backend_flags(config, device)
    with model_code or contextlib.nullcontext():
        if isinstance(source, nn.Module):
            raw = place_model(source, config, device)
        else:
            raw = prepare_model(source, config, device)
    wrapped = wrap_model(raw, config, device, world_size=world_size)
    return raw, compile_model(wrapped, config)


def build_training(
    source: ModelSpec | nn.Module,
    config: TrainConfig,
    device: torch.device,
    *,
    world_size: int = 1,
    loss_fn: LossFn | None = None,
    lr: float = 3e-4,
    weight_decay: float = 0.1,
    grad_clip: float | None = 1.0,
    scheduler: SchedulerFactory | None = None,
    model_code: contextlib.AbstractContextManager[Any] | None = None,
) -> Built:
    """The whole build, in the module docstring's order: the model (``build_step_model``),
    AdamW over its parameters (``lr``, ``weight_decay``; fused per the config) and the
    ``Stepper`` (``grad_clip``; the scheduler ``scheduler`` makes from the optimizer).
    ``loss_fn`` is the spec's unless given; a model given as a module needs one."""
    if loss_fn is None:
        if isinstance(source, nn.Module):
            raise ValueError(
                "build_training: a model given as a module needs its loss_fn "
                "(a function of the model and a batch returning the loss)"
            )
        loss_fn = source.loss_fn
    raw, model = build_step_model(
        source, config, device, world_size=world_size, model_code=model_code
    )
    optimizer = make_optimizer(raw, config, lr=lr, weight_decay=weight_decay)
    stepper = Stepper(
        model,
        optimizer,
        config=config,
        device=device,
        loss_fn=loss_fn,
        grad_clip=grad_clip,
        scheduler=None if scheduler is None else scheduler(optimizer),
    )
    return Built(raw=raw, model=model, optimizer=optimizer, stepper=stepper)
