"""A tiny regression spec whose data function sleeps in every sample: a step that waits
on its loader (input-bound). A trial loads it by file reference: ``f"{SLEEPY}:spec"``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.contract.spec import Batch, ModelSpec

SLEEPY = str(Path(__file__).resolve())
WIDTH = 8

__all__ = ["SLEEPY", "spec"]


class SleepyData(Dataset[Batch]):
    """Random samples, each one ``sleep_s`` late (a slow decoder, a remote disk)."""

    def __init__(self, sleep_s: float, seq_len: int) -> None:
        self.sleep_s = sleep_s
        self.seq_len = seq_len

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> Batch:
        time.sleep(self.sleep_s)
        gen = torch.Generator().manual_seed(index)
        return {
            "x": torch.randn(self.seq_len, WIDTH, generator=gen),
            "y": torch.randn(self.seq_len, 1, generator=gen),
        }


def _build(**kwargs: Any) -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.ReLU(), nn.Linear(4 * WIDTH, 1))


def _batch(args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator) -> Batch:
    return {
        "x": torch.randn(batch_size, seq_len, WIDTH, generator=gen),
        "y": torch.randn(batch_size, seq_len, 1, generator=gen),
    }


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def _data(args: Mapping[str, Any], seq_len: int) -> SleepyData:
    return SleepyData(float(args["sleep_s"]), seq_len)


spec = ModelSpec(
    name="sleepy",
    description="a tiny MLP whose data function sleeps",
    task="regression",
    build_fn=_build,
    make_batch_fn=_batch,
    loss_fn=_loss,
    flops_fn=lambda a, s: 6.0 * 300 * s,
    data_fn=_data,
    args={"sleep_s": 0.01},
    seq_len=8,
    max_seq_len=16,
    global_batch=4,
)
