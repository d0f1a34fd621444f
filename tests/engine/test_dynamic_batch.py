"""Compiled code for any micro-batch on a CPU: the step marks its inputs' batch dimension
dynamic, so one compile serves the next micro-batch (``TrainConfig.any_micro_batch``)."""

from __future__ import annotations

import torch
from torch import nn
from torch._dynamo.testing import CompileCounter

from autotune.config.train_config import TrainConfig
from autotune.engine.step import Stepper


def _frames_for_two_micro_batches(config: TrainConfig) -> int:
    """Steps of micro-batch 2, then 3, through a model compiled with a counting backend;
    how many frames torch.compile compiled."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    raw = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    counter = CompileCounter()
    model = torch.compile(raw, backend=counter)
    stepper = Stepper(
        model,  # type: ignore[arg-type]
        torch.optim.SGD(raw.parameters(), lr=0.1),
        config=config,
        device=torch.device("cpu"),
        loss_fn=lambda m, batch: (m(batch["x"]) - batch["y"]).pow(2).mean(),
    )
    for size in (2, 3):
        stepper.step([{"x": torch.randn(size, 8), "y": torch.randn(size, 1)}])
    return counter.frame_count


def test_a_compiled_cpu_step_compiles_once_for_every_micro_batch() -> None:
    config = TrainConfig(micro_batch=2, grad_accum=1, seq_len=8, compile="default")
    assert config.any_micro_batch("cpu")
    assert _frames_for_two_micro_batches(config) == 1


def test_compiled_regions_and_gpus_keep_a_compile_per_micro_batch() -> None:
    regions = TrainConfig(micro_batch=2, grad_accum=1, seq_len=8, compile="default").replace(
        compile_regions=True
    )
    assert not regions.any_micro_batch("cpu")
    # unmarked, the second shape is compiled again (then as dynamic code)
    assert _frames_for_two_micro_batches(regions) == 2
    compiled = regions.replace(compile_regions=False)
    assert not compiled.any_micro_batch("cuda")
    assert not compiled.replace(compile="off").any_micro_batch("cpu")
