"""The threads a trial's burst gets: the cores outside load leaves, and a rerun on them.

A search gives a CPU burst the cores that outside processes leave (``burst_threads``), but
only as the burst starts. Load that arrives while a burst runs on every core makes one of
torch's threads share its core with another process, and each operation then waits a
scheduler slice for it: mu's naive config (micro-batch 1, fp32) measured 43.8 tokens/s that
way and timed out after 300 s of a 340 s search, where one thread on the core left ran it
at 1,008 tokens/s (2-core EPYC, a busy process at nice 19 on one core; BENCHMARKS.md).
Such a burst is stopped as soon as the watch sees the load and is measured again on the
cores left, once, if the load is still there after ``LOAD_SETTLE_S``: load that has left
by then (a compiler, an editor's indexer, a command typed beside the search) gets the
burst run again on every core. A config measured on one core of two, on a quiet machine,
is a figure of another machine: mu's playbook config (bf16, compiled) measured 1,432
tokens/s that way after a 5-second interruption, against 2,022 for the guide's fp32
config on both cores, and the search refined the fp32 config instead of the best one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.study.session.context import SearchContext
    from autotune.study.trials.burst_runner import BurstRunner

__all__ = ["LOAD_SETTLE_S", "BurstThreads", "LoadArrived"]

# How long a burst stopped for load waits before it runs again, to see whether the load
# stays: the machine watch's busy window (``MachineWatch.burst_threads``: its last 5 s).
LOAD_SETTLE_S = 5.0


@dataclass
class BurstThreads:
    """The threads of one search's bursts, its trials' and its race's alike (one per
    search, made by ``search``). ``last``: the threads of the last burst (None: every
    core, or none ran yet); only this object writes it."""

    context: SearchContext
    last: int | None = None

    def for_burst(self) -> int | None:
        """torch's threads for a CPU burst starting now (``SearchContext.burst_threads``:
        None for every core). Where load shows up just after bursts on every core, wait
        ``LOAD_SETTLE_S`` and look again: a burst started during a 5-second command would
        run on one core of a machine quiet again a moment later (a trial's figure measured
        again later, a race round that no longer compares alike). Under a load that stays,
        only the first burst waits."""
        threads = self.context.burst_threads()
        if threads is not None and self.last is None:
            threads = self.after_settle()
        self.last = threads
        return threads

    def after_settle(self) -> int | None:
        """``SearchContext.burst_threads`` once ``LOAD_SETTLE_S`` has passed: None where
        the load just seen has gone (a burst it stopped or reached runs again on every
        core)."""
        time.sleep(LOAD_SETTLE_S)
        return self.context.burst_threads()

    def run_on_cores_left(
        self,
        bursts: BurstRunner,
        config: TrainConfig,
        *,
        number: int,
        timeout_s: float,
        threads: int | None,
        **options: Any,
    ) -> tuple[BurstResult, int | None]:
        """The trial's burst of ``config`` on ``threads`` (None: every core); if outside
        load arrives while it runs on every core, run again after ``LOAD_SETTLE_S`` on the
        cores the load still leaves (every core, once more, where it has left). The result
        and the threads it ran on. Each run after the first gets what is left of
        ``timeout_s`` (at least 1 s)."""
        context = self.context
        watched = (
            threads is None and context.watch is not None and context.space.device_kind == "cpu"
        )
        if not watched:
            return bursts.run(config, timeout_s=timeout_s, threads=threads, **options), threads
        started = time.monotonic()

        def left() -> float:
            return max(1.0, timeout_s - (time.monotonic() - started))

        settled = False  # waited once for a load to stay or leave
        while True:
            arrived = LoadArrived(context)
            result = bursts.run(config, timeout_s=left(), should_stop=arrived, **options)
            if result.status != "pruned" or arrived.cores_left is None:
                return result, None
            threads = arrived.cores_left
            if settled:
                break
            settled = True
            still = self.after_settle()
            if still is not None:
                threads = still
                break
            context.note(
                f"trial #{number}: outside load stopped its burst and left within "
                f"{LOAD_SETTLE_S:.0f} s: measured again on every core"
            )
        context.note(
            f"trial #{number}: outside load arrived while its burst ran on every core; "
            f"measured again on the {threads} core(s) left"
        )
        self.last = threads
        return bursts.run(config, timeout_s=left(), threads=threads, **options), threads


class LoadArrived:
    """A burst's ``should_stop``: the reason once outside load holds cores, else None."""

    def __init__(self, context: SearchContext) -> None:
        self.context = context
        self.cores_left: int | None = None  # set once it has said stop

    def __call__(self) -> str | None:
        cores = self.context.burst_threads()
        if cores is None:
            return None
        self.cores_left = cores
        return f"outside load arrived while it ran on every core ({cores} left)"
