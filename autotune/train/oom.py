"""Out of memory in a training run: which errors it is, what the message advises, and the
adapted config (``--on-oom adapt``: half the micro-batch, twice the accumulation)."""

from __future__ import annotations

import gc
from pathlib import Path

import torch

from autotune.config.train_config import TrainConfig

__all__ = ["OOM_ERRORS", "free_after_oom", "halved_batch", "oom_message"]

OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, MemoryError)


def halved_batch(config: TrainConfig) -> TrainConfig:
    """``config`` with half the micro-batch and twice the accumulation: the same global
    batch (the caller checks that the micro-batch is at least 2)."""
    return config.replace(micro_batch=config.micro_batch // 2, grad_accum=config.grad_accum * 2)


def oom_message(config: TrainConfig, step: int, exc: BaseException, saved: Path | None) -> str:
    """What running out of memory at ``step`` means and the ways on (``saved``: the
    checkpoint of the last completed step, if one was written)."""
    cfg = config
    where = f"saved the last completed step to {saved}; " if saved else ""
    half = max(1, cfg.micro_batch // 2)
    return (
        f"out of memory at step {step} (micro_batch {cfg.micro_batch}, grad_accum "
        f"{cfg.grad_accum}, {cfg.precision}): {str(exc).splitlines()[0] if str(exc) else ''}"
        f"; {where}rerun with --resume auto --on-oom adapt (halves the micro-batch and "
        f"doubles accumulation, same global batch), or --set config.micro_batch={half} "
        f"--set config.grad_accum={cfg.grad_accum * cfg.micro_batch // half}, or "
        "--set config.activation_checkpointing=true where the model supports it"
    )


def free_after_oom(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Drop the gradients and the allocator's cached blocks, so the run can go on."""
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
