"""A trial's burst that outside load catches on every core is run again on the cores left.

A search gives a CPU burst the cores that outside processes leave (``burst_threads``), but
only as the burst starts. Load that arrives while a burst runs on every core makes one of
torch's threads share its core with another process, and each operation then waits a
scheduler slice for it: mu's naive config (micro-batch 1, fp32) measured 43.8 tokens/s that
way and timed out after 300 s of a 340 s search, where one thread on the core left ran it
at 1,008 tokens/s (2-core EPYC, a busy process at nice 19 on one core; BENCHMARKS.md).
Such a burst is stopped as soon as the watch sees the load and is measured again on the
cores left, once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.objective import BurstRunner
    from autotune.study.state import SearchState

__all__ = ["LoadArrived", "run_on_cores_left"]


class LoadArrived:
    """A burst's ``should_stop``: the reason once outside load holds cores, else None."""

    def __init__(self, state: SearchState) -> None:
        self.state = state
        self.cores_left: int | None = None  # set once it has said stop

    def __call__(self) -> str | None:
        cores = self.state.burst_threads()
        if cores is None:
            return None
        self.cores_left = cores
        return f"outside load arrived while it ran on every core ({cores} left)"


def run_on_cores_left(
    state: SearchState,
    bursts: BurstRunner,
    config: TrainConfig,
    *,
    number: int,
    timeout_s: float,
    threads: int | None,
    **options: Any,
) -> tuple[BurstResult, int | None]:
    """The trial's burst of ``config`` on ``threads`` (None: every core), run again on the
    cores left if outside load arrives while it runs on every core; the result and the
    threads it ran on. The second run gets what is left of ``timeout_s`` (at least 1 s)."""
    watched = threads is None and state.watch is not None and state.space.device_kind == "cpu"
    if not watched:
        return bursts.run(config, timeout_s=timeout_s, threads=threads, **options), threads
    started = time.monotonic()
    arrived = LoadArrived(state)
    result = bursts.run(config, timeout_s=timeout_s, should_stop=arrived, **options)
    if result.status != "pruned" or arrived.cores_left is None:
        return result, None
    threads = arrived.cores_left
    state.note(
        f"trial #{number}: outside load arrived while its burst ran on every core; "
        f"measured again on the {threads} core(s) left"
    )
    left = max(1.0, timeout_s - (time.monotonic() - started))
    return bursts.run(config, timeout_s=left, threads=threads, **options), threads
