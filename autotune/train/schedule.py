"""The learning-rate schedule of a training run: linear warm-up, then cosine, linear or
constant decay to a fraction of the peak rate."""

from __future__ import annotations

import math

import torch

__all__ = ["lr_factor", "make_scheduler", "set_peak_lr"]


def lr_factor(
    step: int, *, warmup: int, total: int, schedule: str = "cosine", min_ratio: float = 0.1
) -> float:
    """The learning-rate multiplier of optimizer step ``step`` (0-based): linear warm-up
    over ``warmup`` steps, then cosine (or linear, or constant) decay to ``min_ratio``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, max(0.0, (step - warmup) / max(1, total - warmup)))
    if schedule == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup: int,
    total: int,
    schedule: str,
    min_ratio: float,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A scheduler that multiplies the optimizer's rate by ``lr_factor`` at each step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(s, warmup=warmup, total=total, schedule=schedule, min_ratio=min_ratio),
    )


def set_peak_lr(scheduler: torch.optim.lr_scheduler.LambdaLR, lr: float) -> None:
    """Make ``lr`` the peak rate and set the next step's rate from it (after a resume, the
    checkpoint's scheduler state holds the old run's peak rate)."""
    groups = scheduler.optimizer.param_groups
    scheduler.base_lrs = [lr] * len(groups)
    factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
    for group in groups:
        group["initial_lr"] = lr
        group["lr"] = lr * factor
    scheduler._last_lr = [group["lr"] for group in groups]
