"""What this machine allows a config: its usable cores, and DataLoader workers per core.

DataLoader workers are processes, each a copy of the dataset's state: a few per core can
help (they wait on I/O), more only contend (a typo such as 100000 forks until the machine
stalls). ``worker_limit`` is the bound; ``autotune.config.checks.machine_problems`` holds a
config to it, with the parallel record's processes per core or GPU.
"""

from __future__ import annotations

import os

__all__ = ["WORKERS_PER_CORE", "usable_cores", "worker_limit"]

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
