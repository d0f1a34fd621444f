"""Tiny fake ModelSpecs that misbehave on purpose, for the burst runner's tests.

A trial process loads them by file reference, e.g. ``f"{FAKES}:oom_spec"`` (the absolute
path of this file), so nothing here may depend on the test process's state. The module's
behaviour is chosen by its constructor arguments (``mode`` and friends), which travel to
the trial as the spec's args.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autotune.contract.spec import Batch, ModelSpec

FAKES = str(Path(__file__).resolve())

WIDTH = 8


class FakeNet(nn.Module):
    """A two-layer MLP over (B, T, W) inputs whose forward can fail in chosen ways."""

    def __init__(
        self,
        *,
        width: int = WIDTH,
        mode: str = "ok",
        oom_above: int = 0,
        sleep_s: float = 0.0,
        slow_calls: int = 0,
        alloc_bytes: int = 0,
        pid_file: str = "",
        step_sleep_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(width, 4 * width)
        self.head = nn.Linear(4 * width, 1)
        self.mode = mode
        self.oom_above = oom_above
        self.sleep_s = sleep_s
        self.slow_calls = slow_calls
        self.alloc_bytes = alloc_bytes
        self.pid_file = pid_file
        self.step_sleep_s = step_sleep_s
        self.calls = 0
        self.hog: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, W)
        self.calls += 1
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        if self.mode == "oom" and x.shape[0] > self.oom_above:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory (fake): batch {x.shape[0]} > {self.oom_above}"
            )
        if self.mode == "sleep":
            if self.pid_file:
                import psutil

                workers = [p.pid for p in psutil.Process().children(recursive=True)]
                Path(self.pid_file).write_text(json.dumps({"pid": os.getpid(), "workers": workers}))
            time.sleep(self.sleep_s)
        if self.mode == "slow_warmup" and self.calls <= self.slow_calls:
            time.sleep(self.sleep_s)
        if self.mode == "abort":
            os.abort()
        if self.mode == "raise":
            raise ValueError(f"fake failure in forward at call {self.calls}")
        if self.mode == "alloc":
            # torch.ones writes every page, so the memory is really held (resident).
            self.hog.append(torch.ones(self.alloc_bytes // 4, device=x.device))
            time.sleep(self.sleep_s)
        y = self.head(torch.relu(self.proj(x)))  # (B, T, 1)
        if self.mode == "nan":
            y = y * float("nan")
        return y


def _build(**kwargs: Any) -> nn.Module:
    return FakeNet(**kwargs)


def _make_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator
) -> Batch:
    width = int(args.get("width", WIDTH))
    return {
        "x": torch.randn(batch_size, seq_len, width, generator=gen),
        "y": torch.randn(batch_size, seq_len, 1, generator=gen),
    }


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]).float(), batch["y"])


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    width = int(args.get("width", WIDTH))
    params = width * 4 * width + 4 * width
    return 6.0 * params * seq_len


fake_spec = ModelSpec(
    name="fake",
    description="a tiny MLP that misbehaves on request",
    task="regression",
    build_fn=_build,
    make_batch_fn=_make_batch,
    loss_fn=_loss,
    flops_fn=_flops,
    args={"width": WIDTH, "mode": "ok"},
    seq_len=16,
    max_seq_len=64,
    global_batch=4,
)

oom_spec = fake_spec.with_args(mode="oom", oom_above=4)
sleep_spec = fake_spec.with_args(mode="sleep", sleep_s=120.0)
abort_spec = fake_spec.with_args(mode="abort")
nan_spec = fake_spec.with_args(mode="nan")
raise_spec = fake_spec.with_args(mode="raise")
slow_warmup_spec = fake_spec.with_args(mode="slow_warmup", slow_calls=2, sleep_s=1.0)
alloc_spec = fake_spec.with_args(mode="alloc", alloc_bytes=1_500_000_000, sleep_s=30.0)
