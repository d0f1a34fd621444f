"""What this machine allows a config: DataLoader workers per usable core and the parallel
record's processes per core or GPU, the checks ``check_config`` and ``PresetLoop`` share.

DataLoader workers are processes, each a copy of the dataset's state: a few per core can
help (they wait on I/O), more only contend (a typo such as 100000 forks until the machine
stalls). ``machine_problems`` is the one place that says so; the parallel record's own
checks are ``autotune.config.parallel.config_problems``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from autotune.config.parallel import config_problems as parallel_problems

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.core.device_caps import DeviceCaps

__all__ = ["WORKERS_PER_CORE", "machine_problems", "usable_cores", "worker_limit"]

WORKERS_PER_CORE = 4


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's
    cpuset) where the OS tells it, else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def worker_limit(cores: int | None = None) -> int:
    """The most DataLoader workers a run may fork here: ``WORKERS_PER_CORE`` per usable core."""
    return WORKERS_PER_CORE * (usable_cores() if cores is None else cores)


def machine_problems(
    config: TrainConfig, device: DeviceCaps | None, *, cores: int | None = None
) -> list[str]:
    """What keeps ``config`` from running on this machine (``cores``: the usable CPU cores,
    default this process's), each with its path: more than ``WORKERS_PER_CORE`` DataLoader
    workers per usable core, and the parallel record's processes per core or GPU (with
    its other checks on ``device``). ``device`` may be None only for a config without a
    parallel record (nothing else here needs it)."""
    cores = usable_cores() if cores is None else cores
    problems: list[str] = []
    limit = worker_limit(cores)
    if config.num_workers > limit:
        problems.append(
            f"config.num_workers: at most {limit} on this machine ({WORKERS_PER_CORE} x "
            f"{cores} usable cores), got {config.num_workers}"
        )
    if config.parallel is not None:
        if device is None:
            raise ValueError("machine_problems: a config with a parallel record needs its device")
        problems += parallel_problems(config, device, cores=cores)
    return problems
