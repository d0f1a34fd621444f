"""Model FLOPs utilisation, one rule for the burst's figure and the trainer's: the model's
FLOPs per sample times the samples each device trains a second, over the device's peak
for the config's precision (``DeviceCaps.peak_flops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = ["mfu"]


def mfu(
    spec: ModelSpec,
    config: TrainConfig,
    caps: DeviceCaps | None,
    *,
    samples_per_s: float | None,
    world_size: int = 1,
) -> float | None:
    """The MFU of ``samples_per_s`` (all processes together) over ``world_size`` devices;
    None without a throughput, the device's peak for the precision, or a positive FLOPs
    figure. A user's FLOPs formula that raises gives None: it must not sink a measurement
    or stop a training run at its log line."""
    if samples_per_s is None or caps is None:
        return None
    peak = caps.peak_flops(config.precision)
    if not peak:
        return None
    try:
        flops = spec.flops_per_sample(config.seq_len)
    except Exception:
        return None
    if not flops or flops <= 0:
        return None
    return flops * samples_per_s / world_size / peak
