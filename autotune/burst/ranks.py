"""A trial of several processes under torchrun (``autotune/engine/distributed.py``): each
rank's place and config, its state for a checkpoint, and rank 0's result gathered from
every rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from autotune.config.train_config import TrainConfig
    from autotune.engine.distributed import DistInfo

__all__ = ["across_ranks", "join_ranks", "rank_state"]


def join_ranks(config: TrainConfig, device: str) -> tuple[DistInfo, str, TrainConfig]:
    """This rank's place (a world of one outside torchrun), its device and the config it
    runs: ``grad_accum / world size`` micro-batches, so the global batch is the config's."""
    from autotune.engine.distributed import init_distributed, per_rank_config

    info, device = init_distributed(device)
    return info, device, per_rank_config(config, info.world_size)


def across_ranks(
    dist: DistInfo | None, result: dict[str, Any], budget: int | None
) -> dict[str, Any]:
    """Rank 0's result with the memory figures of the busiest rank (peaks are per rank: a
    budget is each process's) and the first failure any rank saw."""
    if dist is None or not dist.enabled:
        return result
    from autotune.core.units import over_budget
    from autotune.engine.distributed import all_gather_objects

    keys = ("status", "reason", "peak_bytes", "own_peak_rss_bytes")
    ranks = all_gather_objects(dist, {k: result.get(k) for k in keys})
    out = dict(result)
    for key in ("peak_bytes", "own_peak_rss_bytes"):
        values = [r[key] for r in ranks if r[key] is not None]
        out[key] = max(values) if values else None
    failed = [(i, r) for i, r in enumerate(ranks) if r["status"] != "ok"]
    if failed:
        rank, first = failed[0]
        out["status"], out["reason"] = first["status"], f"rank {rank}: {first['reason']}"
    elif (reason := over_budget(out["peak_bytes"], budget, whose="a rank's peak")) is not None:
        out["status"], out["reason"] = "oom", reason
    out["ranks"] = dist.world_size
    return out


def rank_state(
    module: nn.Module, optimizer: Any, config: TrainConfig, dist: DistInfo | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    from autotune.engine.wrapping import full_state, is_sharded

    if dist is not None and is_sharded(config, dist.world_size):
        return full_state(module, optimizer)
    return module.state_dict(), optimizer.state_dict()
