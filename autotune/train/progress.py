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
from autotune.engine.mfu import mfu

if TYPE_CHECKING:
    from pathlib import Path

    from autotune.config.train_config import TrainConfig, TrainingDefaults
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "OptimizerTimer",
    "TrainingProgress",
    "check_finite",
    "new_interval",
    "opening_lines",
    "train_record",
]


def new_interval() -> dict[str, float]:
    """Sums over the steps since the last log line: seconds, data wait, optimizer, samples."""
    return {"time": 0.0, "data": 0.0, "opt": 0.0, "samples": 0.0}


@dataclass(kw_only=True)
class TrainingProgress:
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


def opening_lines(
    spec: ModelSpec,
    config: TrainConfig,
    training: TrainingDefaults,
    *,
    total: int,
    world_size: int,
    device: torch.device,
    eval_batch: int,
    out_dir: Path,
) -> list[str]:
    """What the run is: the model (on ``device``, ``world_size`` processes), the config
    (one process's share: global batch, precision, compile, ...) and the optimisation
    settings (``total`` steps; ``eval_batch``; ``out_dir``, the run folder)."""
    cfg, several = config, world_size > 1
    counts = spec.param_counts()
    global_batch = cfg.micro_batch * cfg.grad_accum * world_size
    tokens = global_batch * spec.tokens_per_sample(cfg.seq_len)
    t = training
    return [
        f"model {spec.name}: {counts.total / 1e6:.2f}M parameters "
        f"({counts.non_embedding / 1e6:.2f}M non-embedding) on {device}"
        + (f" x {world_size} processes" if several else "")
        + (f" ({cfg.parallel.label()})" if several and cfg.parallel else ""),
        f"config: micro_batch {cfg.micro_batch} x grad_accum {cfg.grad_accum}"
        + (f" x world {world_size}" if several else "")
        + f" = global batch {global_batch} ({tokens:,} {spec.throughput_unit}/step), "
        f"{spec.size_label(cfg.seq_len)}, {cfg.precision}, compile {cfg.compile}"
        + (" (each block)" if cfg.compile_regions else "")
        + ", "
        f"activation checkpointing {'on' if cfg.activation_checkpointing else 'off'}, "
        f"{cfg.num_workers} workers"
        + (", OpenMP threads spin (omp_spin)" if cfg.omp_spin else "")
        + f"; eval batch {eval_batch}",
        f"training: {total} steps, AdamW lr {t.lr:g} ({t.schedule}, warm-up "
        f"{t.warmup_steps}, min ratio {t.min_lr_ratio:g}), weight decay {t.weight_decay:g}, "
        f"grad clip {t.grad_clip}, seed {t.seed}; out {out_dir}",
    ]


def train_record(
    values: list[float],
    interval: Mapping[str, float],
    *,
    step: int,
    epoch: int,
    lr: float,
    grad_norm: torch.Tensor | None,
    tokens_per_sample: int,
    spec: ModelSpec,
    config: TrainConfig,
    caps: DeviceCaps | None,
    world_size: int,
) -> dict[str, Any]:
    """The log line of the steps since the last one (up to ``step``, in ``epoch``), whose
    losses are ``values`` and whose sums are ``interval``; ``spec``, ``config``, ``caps``
    and ``world_size`` give its MFU (``mfu``)."""
    elapsed = max(interval["time"], 1e-9)
    samples_per_s = interval["samples"] / elapsed
    n = len(values)
    return {
        "type": "train",
        "step": step,
        "epoch": epoch,
        "loss": sum(values) / n,
        "lr": lr,
        "grad_norm": None if grad_norm is None else float(grad_norm.item()),
        "tokens_per_s": samples_per_s * tokens_per_sample,
        "samples_per_s": samples_per_s,
        "mfu": mfu(spec, config, caps, samples_per_s=samples_per_s, world_size=world_size),
        "step_time_s": elapsed / n,
        "data_wait_s": interval["data"] / n,
        "optimizer_s": interval["opt"] / n,
        "compute_s": max(0.0, elapsed - interval["data"] - interval["opt"]) / n,
    }


def check_finite(
    values: Sequence[float], *, step: int, last_saved: int | None, precision: str = "fp32"
) -> None:
    """Stop the run at a training loss that is not finite (``values``: the losses read at
    ``step``), naming the last checkpoint and what to change."""
    bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is None:
        return
    first = step - len(values) + 1 + bad  # the step whose loss first was not finite
    if first == 1:  # before any update: no learning rate made it so (fp16 may overflow)
        fp16 = precision == "fp16"
        cause = (
            "the model's loss, its data or fp16's range" if fp16 else "the model's loss or its data"
        )
        fix = "; or use bf16 or fp32, which do not overflow there" if fp16 else ""
        raise AutotuneError(
            f"the training loss is not finite at the run's first step ({values[bad]}), "
            f"before any update: {cause} gives it; check the loss function and the batches "
            f"(autotune models show lists the model's contract){fix}"
        )
    last = f"; the last checkpoint is step {last_saved}" if last_saved else ""
    raise AutotuneError(
        f"the training loss is not finite at step {first} ({values[bad]})"
        f"{last}; lower training.lr (--lr), use fp32 or bf16 rather than fp16, "
        "or check the data"
    )
