"""What a training run reports as it goes: the lines that open it, each log line's record
(loss, throughput, MFU, the step time split into data wait, optimizer and compute), and
what the loop carries from one step to the next for them."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from autotune.core.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps
    from autotune.train.trainer import Trainer

__all__ = [
    "OptimizerTimer",
    "Progress",
    "check_finite",
    "mfu",
    "new_interval",
    "opening_lines",
    "train_record",
]


def new_interval() -> dict[str, float]:
    """Sums over the steps since the last log line: seconds, data wait, optimizer, samples."""
    return {"time": 0.0, "data": 0.0, "opt": 0.0, "samples": 0.0}


@dataclass(kw_only=True)
class Progress:
    """What the training loop carries from one step to the next."""

    tokens_per_sample: int
    losses: list[float] = field(default_factory=list)  # every step this process ran
    pending: list[torch.Tensor] = field(default_factory=list)  # losses not yet read
    step_times: list[float] = field(default_factory=list)
    interval: dict[str, float] = field(default_factory=new_interval)
    last_eval: dict[str, Any] | None = None
    grad_norm: torch.Tensor | None = None


class OptimizerTimer:
    """The seconds ``optimizer.step`` took since ``seconds`` was last set to 0 (the log
    line's optimizer share), from the optimizer's own step hooks."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.seconds = 0.0
        self._start = 0.0
        optimizer.register_step_pre_hook(self._pre)
        optimizer.register_step_post_hook(self._post)

    def _pre(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def _post(self, *_: Any) -> None:
        self.seconds += time.perf_counter() - self._start


def mfu(
    spec: ModelSpec,
    config: TrainConfig,
    caps: DeviceCaps | None,
    *,
    samples_per_s: float,
    world_size: int,
) -> float | None:
    """Model FLOPs utilisation of ``samples_per_s`` over ``world_size`` devices; None
    without the device's peak for the config's precision."""
    if caps is None:
        return None
    peak = caps.peak_flops(config.precision)
    if not peak:
        return None
    per_device = samples_per_s / world_size
    return spec.flops_per_sample(config.seq_len) * per_device / peak


def opening_lines(trainer: Trainer, total: int) -> list[str]:
    """What the run is: the model, the config (global batch, precision, compile, ...) and
    the optimisation settings."""
    spec, cfg, dist = trainer.spec, trainer.config, trainer.dist
    counts = spec.param_counts()
    global_batch = cfg.micro_batch * cfg.grad_accum * dist.world_size
    tokens = global_batch * spec.tokens_per_sample(cfg.seq_len)
    t = trainer.training
    return [
        f"model {spec.name}: {counts.total / 1e6:.2f}M parameters "
        f"({counts.non_embedding / 1e6:.2f}M non-embedding) on {trainer.device}"
        + (f" x {dist.world_size} processes" if dist.enabled else "")
        + (f" ({cfg.parallel.label()})" if dist.enabled and cfg.parallel else ""),
        f"config: micro_batch {cfg.micro_batch} x grad_accum {cfg.grad_accum}"
        + (f" x world {dist.world_size}" if dist.enabled else "")
        + f" = global batch {global_batch} ({tokens:,} {spec.throughput_unit}/step), "
        f"{spec.size_label(cfg.seq_len)}, {cfg.precision}, compile {cfg.compile}"
        + (" (each block)" if cfg.compile_regions else "")
        + ", "
        f"activation checkpointing {'on' if cfg.activation_checkpointing else 'off'}, "
        f"{cfg.num_workers} workers"
        + (", OpenMP threads spin (omp_spin)" if cfg.omp_spin else "")
        + f"; eval batch {trainer.eval_batch}",
        f"training: {total} steps, AdamW lr {t.lr:g} ({t.schedule}, warm-up "
        f"{t.warmup_steps}, min ratio {t.min_lr_ratio:g}), weight decay {t.weight_decay:g}, "
        f"grad clip {t.grad_clip}, seed {t.seed}; out {trainer.out_dir}",
    ]


def train_record(
    trainer: Trainer,
    values: list[float],
    interval: Mapping[str, float],
    *,
    tokens_per_sample: int,
    grad_norm: torch.Tensor | None,
) -> dict[str, Any]:
    """The log line of the steps since the last one, whose losses are ``values``."""
    elapsed = max(interval["time"], 1e-9)
    samples_per_s = interval["samples"] / elapsed
    n = len(values)
    return {
        "type": "train",
        "step": trainer.step,
        "epoch": trainer.stream.epoch,
        "loss": sum(values) / n,
        "lr": float(trainer.scheduler.get_last_lr()[0]),
        "grad_norm": None if grad_norm is None else float(grad_norm.item()),
        "tokens_per_s": samples_per_s * tokens_per_sample,
        "samples_per_s": samples_per_s,
        "mfu": mfu(
            trainer.spec,
            trainer.config,
            trainer.caps,
            samples_per_s=samples_per_s,
            world_size=trainer.dist.world_size,
        ),
        "step_time_s": elapsed / n,
        "data_wait_s": interval["data"] / n,
        "optimizer_s": interval["opt"] / n,
        "compute_s": max(0.0, elapsed - interval["data"] - interval["opt"]) / n,
    }


def check_finite(values: Sequence[float], *, step: int, last_saved: int | None) -> None:
    """Stop the run at a training loss that is not finite (``values``: the losses read at
    ``step``), naming the last checkpoint and what to change."""
    if not values or all(math.isfinite(v) for v in values):
        return
    last = f"; the last checkpoint is step {last_saved}" if last_saved else ""
    raise AutotuneError(
        f"the training loss is not finite at step {step} ({values[-1]})"
        f"{last}; lower training.lr (--lr), use fp32 or bf16 rather than fp16, "
        "or check the data"
    )
