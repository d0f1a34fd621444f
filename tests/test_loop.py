"""``autotune.train.loop.PresetLoop``: a preset's config in a hand-written loop runs the same
DataLoader arguments, autocast and step function as the burst that measured it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from fake_presets import make_config, make_preset
from torch import nn

import autotune.config.checks
from autotune.config.parallel import ParallelConfig
from autotune.config.train_config import MAX_NUM_WORKERS
from autotune.core.errors import ConfigError, UsageError
from autotune.data import loader_kwargs
from autotune.preset import ModelRef, save_preset
from autotune.testing.fake_caps import cpu_caps
from autotune.train.loop import PresetLoop

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = [{"x": torch.full((4,), float(i)), "y": torch.ones(1)} for i in range(40)]


def mse(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def test_the_loader_has_the_measured_arguments() -> None:
    config = make_config(num_workers=2, prefetch_factor=3, persistent_workers=True)
    loop = PresetLoop(config)
    loader = loop.dataloader(SAMPLES, shuffle=True)
    expected = loader_kwargs(config)
    assert loader.batch_size == expected["batch_size"] == 8
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 3, True)
    assert loader.drop_last is True
    with pytest.raises(ValueError, match=r"\['batch_size'\] differ from the preset's"):
        loop.dataloader(SAMPLES, batch_size=4)


def test_steps_group_micro_batches_per_optimizer_step() -> None:
    loop = PresetLoop(make_config(micro_batch=4, grad_accum=2))  # 40 samples: 10 micro-batches
    loader = loop.dataloader(SAMPLES)
    assert [len(g) for g in loop.steps(loader)] == [2] * 5
    assert len(list(loop.steps(loader, max_steps=12))) == 12  # epochs follow each other
    assert all(b["x"].device == loop.device for g in loop.steps(loader) for b in g)


def test_the_step_is_autotunes_stepper() -> None:
    loop = PresetLoop(make_config(micro_batch=4, grad_accum=2, precision="bf16"))
    model = loop.prepare(nn.Linear(4, 1))
    optimizer = loop.optimizer(model, lr=1e-2)
    stepper = loop.stepper(model, optimizer, loss_fn=mse)
    assert stepper.config is loop.config and stepper.grad_clip == 1.0
    before = model.weight.detach().clone()
    for group in loop.steps(loop.dataloader(SAMPLES), max_steps=2):
        out = stepper.step(group)
        assert torch.isfinite(out.loss)
    assert not torch.equal(before, model.weight)
    with loop.autocast():
        assert model(torch.zeros(2, 4)).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "world_size must be a positive integer, got 0"),
        ({"world_size": True}, "world_size must be a positive integer, got True"),
        ({"device": "tpu"}, "device 'tpu' is not a device torch knows"),
    ],
)
def test_a_loop_refuses_a_world_or_device_that_is_none(
    kwargs: dict[str, Any], message: str
) -> None:
    # 0, -2 and True were taken as one process, "tpu" ended in torch's RuntimeError
    with pytest.raises(UsageError, match=message):
        PresetLoop(make_config(micro_batch=8, grad_accum=4), **kwargs)


def test_the_global_batch_is_kept_over_processes() -> None:
    loop = PresetLoop(make_config(micro_batch=8, grad_accum=4), world_size=2)
    assert (loop.micro_batch, loop.grad_accum) == (8, 2)
    with pytest.raises(ConfigError, match="4 does not split over 3 processes"):
        PresetLoop(make_config(micro_batch=8, grad_accum=4), world_size=3)


def test_from_a_preset_file_reads_data_only(tmp_path: Path) -> None:
    planted = tmp_path / "model.py"
    planted.write_text("raise SystemExit('imported!')\n")
    preset = make_preset(
        model=ModelRef(name=f"{planted}:spec"), config=make_config(compile="default")
    )
    path = save_preset(preset, tmp_path / "best.yaml")
    loop = PresetLoop.from_preset(path)
    assert loop.config == preset.config and loop.grad_clip == preset.training.grad_clip


def test_a_preset_with_more_workers_than_this_machine_allows_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's limits that ``autotune train`` applies (``machine_problems``) hold for
    the Python API too: no loader with 1024 workers on a one-core machine."""
    monkeypatch.setattr(autotune.config.checks, "usable_cores", lambda: 1)
    preset = make_preset(config=make_config(num_workers=MAX_NUM_WORKERS))
    path = save_preset(preset, tmp_path / "best.yaml")
    with pytest.raises(ConfigError) as info:
        PresetLoop.from_preset(path)
    assert "config.num_workers: at most 4 on this machine (4 x 1 usable cores), got 1024" in str(
        info.value
    )
    PresetLoop(make_config(num_workers=4))  # the limit itself runs


def test_more_processes_than_cores_are_refused_with_every_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(autotune.config.checks, "usable_cores", lambda: 2)
    config = make_config(num_workers=9, parallel=ParallelConfig(nproc_per_node=4))
    with pytest.raises(ConfigError) as info:
        PresetLoop(config, world_size=4, device_caps=cpu_caps())
    assert [p.split(":")[0] for p in info.value.problems] == [
        "config.num_workers",
        "config.parallel.nproc_per_node",
    ]
