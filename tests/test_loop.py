"""``autotune.train.loop.PresetLoop``: a preset's config in a hand-written loop runs the same
DataLoader arguments, autocast and step function as the burst that measured it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fake_presets import make_config, make_preset
from torch import nn

from autotune.core.errors import ConfigError
from autotune.data import loader_kwargs
from autotune.preset import ModelRef, save_preset
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


def test_the_global_batch_is_kept_over_processes() -> None:
    loop = PresetLoop(make_config(micro_batch=8, grad_accum=4), world_size=2)
    assert (loop.micro_batch, loop.grad_accum) == (8, 2)
    with pytest.raises(ConfigError, match="world size 3"):
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
