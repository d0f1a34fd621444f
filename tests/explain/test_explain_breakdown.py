"""The profiled breakdown of a step, in this process: where the time goes, that the parts
add up to the step, and the verdict they lead to on chosen models."""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sleepy_spec import spec as sleepy_spec
from torch import nn

from autotune.burst.trial import _build
from autotune.burst.trial_batches import forever, make_loader
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import Batch, ModelSpec
from autotune.engine.step import Stepper, make_optimizer
from autotune.explain import PARTS, Breakdown, classify, profile_steps, refine_order
from autotune.explain.breakdown import profiled_step_count, top_modules

pytestmark = pytest.mark.usefixtures("one_thread")

CPU = torch.device("cpu")


@functools.cache
def _tiny_models() -> dict[str, Any]:
    """Each built-in family at its tiny test size (tests/models/_tiny_models.py)."""
    path = Path(__file__).resolve().parents[1] / "models" / "_tiny_models.py"
    name = "_explain_tiny_models"
    loaded = importlib.util.spec_from_file_location(name, path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules[name] = module  # its dataclass looks its module up
    loaded.loader.exec_module(module)
    return dict(module.TINY)


def _profile(spec: ModelSpec, config: TrainConfig, *, steps: int = 2) -> Breakdown:
    """The trial's own build and data path, then ``steps`` profiled steps."""
    stepper = _build(spec, config, CPU).stepper
    samples = (steps + 1) * config.grad_accum * config.micro_batch
    batches = forever(make_loader(spec, config, samples=samples, seed=0))
    try:
        return profile_steps(stepper, batches, config, steps=steps)
    finally:
        batches.close()


def _repeat(batch: Batch) -> Iterator[Batch]:
    while True:
        yield batch


def _profile_module(model: nn.Module, batch: Batch, micro_batch: int) -> Breakdown:
    config = TrainConfig(micro_batch=micro_batch, grad_accum=1, seq_len=1)
    stepper = Stepper(
        model,
        make_optimizer(model, config),
        config=config,
        device=CPU,
        loss_fn=lambda m, b: m(b["x"]).pow(2).mean(),
    )
    return profile_steps(stepper, _repeat(batch), config, steps=3)


def _check_sums(b: Breakdown) -> None:
    """The named parts never double count: with the rest they make the step (10%), and
    the modules' rows make the forward and backward phases."""
    assert all(b.parts[p] >= 0 for p in PARTS), b.parts
    assert b.named_s <= 1.1 * b.step_s, (b.named_s, b.step_s)
    assert abs(b.named_s + b.parts["rest"] - b.step_s) <= 0.1 * b.step_s
    assert b.parts["forward"] > 0 and b.parts["backward"] > 0 and b.parts["optimizer"] > 0
    if b.modules:
        forward = sum(m["forward"] for m in b.modules.values())
        backward = sum(m["backward"] for m in b.modules.values())
        assert forward == pytest.approx(b.parts["forward"], rel=0.1)
        assert backward == pytest.approx(b.parts["backward"], rel=0.1)


@pytest.mark.parametrize("name", sorted(_tiny_models()))
def test_parts_sum_to_the_step_on_every_built_in_model(name: str) -> None:
    tiny = _tiny_models()[name]
    config = TrainConfig(micro_batch=2, grad_accum=2, seq_len=tiny.seq_len)
    b = _profile(tiny.spec, config)
    _check_sums(b)
    assert b.steps == 2 and b.ops_per_step > 0 and b.op_s > 0
    children = {n for n, _ in top_modules(tiny.spec.build())}
    assert children and children <= set(b.modules), (children, set(b.modules))


def test_a_sleeping_data_function_is_input_bound_and_names_num_workers_first() -> None:
    config = TrainConfig(micro_batch=2, grad_accum=1, seq_len=8, num_workers=0)
    b = _profile(sleepy_spec, config)
    _check_sums(b)
    assert b.share("data_wait") > 0.5  # two samples of 10 ms against a tiny model
    verdict = classify(b)
    assert verdict.kind == "input-bound", verdict
    assert verdict.knobs[0] == "num_workers"
    assert refine_order(verdict)[0] == "num_workers"


def test_a_tiny_model_of_many_small_operations_is_overhead_bound_on_cpu() -> None:
    small = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(40)])
    b = _profile_module(small, {"x": torch.randn(2, 4)}, 2)
    _check_sums(b)
    verdict = classify(b)
    assert verdict.kind == "overhead-bound", verdict
    assert b.ops_per_step > 200
    assert refine_order(verdict)[:2] == ["compile", "micro_batch"]


def test_a_few_large_matmuls_are_not_overhead_bound() -> None:
    big = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    b = _profile_module(big, {"x": torch.randn(512, 512)}, 512)
    verdict = classify(b)
    assert "overhead-bound" not in {f.kind for f in verdict.findings}, verdict
    assert b.op_s > 0.5 * b.step_s and b.ops_per_step < 200  # few operators, most of the step
    assert any("MFU unknown" in line for line in verdict.unknown)
    assert list(b.modules) == ["0", "1", "2", "(model's own ops)", "loss", "(autograd engine)"]


def test_a_compiled_model_has_phases_but_says_why_no_modules() -> None:
    model = nn.Linear(4, 4)
    config = TrainConfig(micro_batch=2, grad_accum=1, seq_len=1, compile="default")
    stepper = Stepper(
        model,
        make_optimizer(model, config),
        config=config,
        device=CPU,
        loss_fn=lambda m, b: m(b["x"]).sum(),
    )  # fmt: skip  (not compiled: only the note depends on the config)
    b = profile_steps(stepper, _repeat({"x": torch.randn(2, 4)}), config, steps=1)
    assert b.modules == {} and "compile" in b.modules_note
    assert b.parts["forward"] > 0


def test_the_normal_step_opens_no_profiler_range() -> None:
    from torch.profiler import ProfilerActivity, profile

    model = nn.Linear(4, 4)
    config = TrainConfig(micro_batch=2, grad_accum=1, seq_len=1)
    stepper = Stepper(
        model, make_optimizer(model, config), config=config, device=CPU,
        loss_fn=lambda m, b: m(b["x"]).sum(),
    )  # fmt: skip
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        stepper.step([{"x": torch.randn(2, 4)}])
    assert not [e.name for e in prof.events() if e.name.startswith("autotune.")]
    b = profile_steps(stepper, _repeat({"x": torch.randn(2, 4)}), config, steps=1)
    assert b.parts["optimizer"] > 0 and stepper.profile is False


@pytest.mark.parametrize(
    ("steps", "grad_accum", "profiled"), [(3, 1, 3), (3, 4, 2), (3, 8, 1), (3, 32, 1), (1, 1, 1)]
)
def test_a_profile_covers_a_bounded_number_of_micro_batches(
    steps: int, grad_accum: int, profiled: int
) -> None:
    """The profiler holds an event per operator call: a config of 32 micro-batches a step
    is profiled for one step, not three (pointer-gen's naive profile was OOM-killed)."""
    assert profiled_step_count(steps, grad_accum) == profiled
