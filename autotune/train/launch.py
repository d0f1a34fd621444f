"""What a training run is decided from, before it starts: the function behind ``autotune
train`` that a Python caller can use too.

``prepare_training`` loads the preset (or takes a bare model: fp32, the micro-batch its
global batch), checks that this machine can run it, applies the changes asked for
(``max_steps``, ``lr``, ``eval_interval``, ``section.field=value`` overrides), picks the
device and checks the config on it. What it returns is what ``autotune.train.run.train``
takes::

    run = prepare_training(preset="best.yaml", max_steps=2000)
    train(run.spec, run.config, run.training, out_dir="runs/a", device=run.device,
          device_caps=run.caps)

Errors name the parameter (``max_steps: expected a positive integer, got 0``); the CLI
passes ``option_names`` so that its messages name its flags instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.config.checks import check_config
from autotune.config.overrides import apply_overrides
from autotune.config.train_config import TrainConfig
from autotune.core import launch_env
from autotune.core.errors import UsageError
from autotune.core.validator import COUNT, show
from autotune.preset import (
    ModelRef,
    PortabilityReport,
    TrainingDefaults,
    check_portability,
    default_device_for,
    load_preset,
    resolve_preset,
)

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile

__all__ = ["PreparedRun", "prepare_training"]


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    """A run ready for ``autotune.train.run.train``."""

    spec: ModelSpec
    config: TrainConfig
    training: TrainingDefaults
    device: str  # as asked for: under torchrun, "cuda" trains on each process's own GPU
    caps: DeviceCaps  # what this process's device can do
    name: str  # the preset's name, or the model's (the CLI's default run folder)
    report: PortabilityReport | None  # the preset's portability check; None for a bare model


def rank_device(device: str) -> str:
    """The device this process trains on: under torchrun on CUDA, ``cuda:LOCAL_RANK``."""
    if device.startswith("cuda") and launch_env.world_size() > 1:
        return f"cuda:{launch_env.env_int('LOCAL_RANK', 0)}"
    return device


def _check_arguments(
    preset: str | Path | None,
    model: str | None,
    *,
    model_args: Mapping[str, object] | None,
    max_steps: int | None,
    lr: float | None,
    eval_interval: int | None,
    names: Mapping[str, str],
) -> None:
    def name(parameter: str) -> str:
        return names.get(parameter, parameter)

    if preset is None and model is None:
        raise UsageError(
            f"give {name('preset')} (a tuned config from `autotune search`) or "
            f"{name('model')} (an untuned fp32 run)"
        )
    if model_args and preset is not None:
        raise UsageError(
            f"{name('model_args')} sets the arguments of a model trained without a preset; "
            "a preset's model arguments are its model.args (searched with it): drop "
            f"{name('model_args')}, or train the model without the preset"
        )
    for parameter, value in (("max_steps", max_steps), ("eval_interval", eval_interval)):
        if value is not None and (wanted := COUNT.wanted(value)):  # as the preset's counts
            raise UsageError(f"{name(parameter)}: expected {wanted}, got {show(value)}")
    if lr is not None and not 0 < lr < math.inf:  # NaN and inf too
        raise UsageError(f"{name('lr')}: expected a finite number > 0, got {lr}")


def _with_changes(
    training: TrainingDefaults,
    *,
    max_steps: int | None,
    lr: float | None,
    eval_interval: int | None,
) -> TrainingDefaults:
    """``training`` with the steps (replacing the epochs), rate and evaluation asked for."""
    changes: dict[str, object] = {}
    if max_steps is not None:
        changes.update(max_steps=max_steps, epochs=None)
    if lr is not None:
        changes["lr"] = lr
    if eval_interval is not None:
        changes["eval_interval"] = eval_interval
    if changes:
        training = dataclasses.replace(training, **changes)  # type: ignore[arg-type]
    return training


def _load_preset_model(
    ref: ModelRef,
    model: str | None,
    *,
    trust: bool,
    warn: Callable[[str], None] | None,
    names: Mapping[str, str],
) -> ModelSpec:
    """The preset's model; ``model``, when given too, must name the same one (and is then
    the user's consent to run it)."""
    if model is not None and model != ref.name:
        flag = names.get("model", "model").split()[0]
        raise UsageError(
            f"{flag} {model!r} is not the preset's model {ref.name!r}: give {flag} only to "
            "train without a preset, or to allow the preset's own model code to run"
        )
    notes: list[str] = []
    spec = ref.load(trust=trust or model is not None, notes=notes)
    for text in notes:
        if warn is not None:
            warn(text)
    return spec


def prepare_training(
    *,
    preset: str | Path | None = None,
    model: str | None = None,
    device: str | None = None,
    force: bool = False,
    max_steps: int | None = None,
    lr: float | None = None,
    eval_interval: int | None = None,
    overrides: Sequence[str] = (),
    profile: HardwareProfile | None = None,
    warn: Callable[[str], None] | None = None,
    option_names: Mapping[str, str] | None = None,
    trust_model: bool = False,
    model_args: Mapping[str, object] | None = None,
) -> PreparedRun:
    """The spec, config, training settings and device of a run (see the module docstring).

    ``preset``: a preset file or the name of one; or ``model``: a built-in name,
    ``pkg.module:attr`` or ``path/to/file.py:attr``. A preset is data: where it names
    user code, that code runs only with ``trust_model`` or with the same reference given
    as ``model`` (the user's consent); ``warn`` then hears which file runs. ``device``: default
    the preset's kind (a bare model: the best device here). ``force`` runs a preset whose
    recorded memory may not fit. ``max_steps`` replaces the preset's steps and epochs.
    ``overrides``: ``config.micro_batch=4``, ``training.lr=1e-3``, ... ``profile``: this
    machine (default: probed). ``warn`` hears the portability warnings as they come.
    ``option_names`` maps a parameter to the name errors give it (the CLI's flags).
    ``model_args``: arguments of the bare ``model`` set (an ``hf:`` model's config fields);
    a preset's are its ``model.args``.
    """
    from autotune.machine.hardware import probe
    from autotune.models import load_model

    names = option_names or {}
    _check_arguments(
        preset,
        model,
        model_args=model_args,
        max_steps=max_steps,
        lr=lr,
        eval_interval=eval_interval,
        names=names,
    )
    # the preset or the model first: a mistake in either is said before the probe's seconds
    report: PortabilityReport | None = None
    if preset is not None:
        loaded = load_preset(resolve_preset(str(preset)))
        profile = profile or probe()
        wanted = device or default_device_for(loaded, profile)
        report = check_portability(loaded, profile, rank_device(wanted), force=force)
        if warn is not None:
            for text in report.warnings:
                warn(text)
        spec = _load_preset_model(loaded.model, model, trust=trust_model, warn=warn, names=names)
        config, training, name = loaded.config, loaded.training, loaded.name
    else:
        spec = load_model(str(model), model_args)
        profile = profile or probe()
        wanted = device or profile.default_device
        config = TrainConfig(micro_batch=spec.global_batch, seq_len=spec.seq_len)
        training, name = TrainingDefaults(), spec.name

    training = _with_changes(training, max_steps=max_steps, lr=lr, eval_interval=eval_interval)
    before = config.micro_batch * config.grad_accum
    config, training = apply_overrides(config, training, overrides)
    after = config.micro_batch * config.grad_accum
    if warn is not None and report is not None and after != before:  # a preset's batch
        warn(
            f"--set changes the global batch from {before} to {after} samples a step "
            f"(micro-batch {config.micro_batch} x accumulation {config.grad_accum}): "
            "the learning rate and the preset's figures were for the former"
        )

    caps = profile.device(rank_device(wanted))
    check_config(config, spec=spec, device=caps)
    return PreparedRun(
        spec=spec,
        config=config,
        training=training,
        device=wanted,
        caps=caps,
        name=name,
        report=report,
    )
