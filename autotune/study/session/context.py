"""What one search knows before its first trial and never changes: the model, the space,
the budget, the limits, the clock, where its progress goes and the machine watch."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.study.session.deadline import Deadline
from autotune.study.trials.records import SearchEvent

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.study.plan.space import SearchSpace
    from autotune.study.session.watch import MachineWatch

__all__ = ["Limits", "SearchContext"]


@dataclass(frozen=True)
class Limits:
    """When a search stops: after ``trials`` measured trials (earlier runs' included), or
    once ``time_limit_s`` seconds have passed (None: no such limit)."""

    trials: int | None
    time_limit_s: float | None


@dataclass(frozen=True, kw_only=True)
class SearchContext:
    """The fixed facts of one search process. Nothing here is written once the search
    runs; the one part that changes is the deadline's race reserve (``Deadline``).

    ``burst_limit_s``: this search's --burst-timeout, which a resumed study's timeouts are
    weighed against (None: every timeout stands); ``progress``: where the search's events
    go (None: nowhere); ``watch``: what else the machine runs (None: not watched; a search
    that watches makes its context again with it, ``dataclasses.replace``)."""

    spec: ModelSpec
    space: SearchSpace
    budget_bytes: int
    limits: Limits
    deadline: Deadline
    burst_limit_s: float | None = None
    progress: Callable[[SearchEvent], None] | None = None
    watch: MachineWatch | None = None

    @classmethod
    def of(
        cls,
        *,
        spec: ModelSpec,
        space: SearchSpace,
        budget_bytes: int,
        limits: Limits,
        started: float | None = None,
        burst_limit_s: float | None = None,
        progress: Callable[[SearchEvent], None] | None = None,
    ) -> SearchContext:
        """The context of a search whose time limit counts from ``started``
        (``time.monotonic``; None: now)."""
        return cls(
            spec=spec,
            space=space,
            budget_bytes=budget_bytes,
            limits=limits,
            deadline=Deadline(limit_s=limits.time_limit_s, started=started),
            burst_limit_s=burst_limit_s,
            progress=progress,
        )

    @property
    def device(self) -> str:
        return self.space.device

    @property
    def unit(self) -> str:
        return self.spec.throughput_label

    # -- progress --------------------------------------------------------------------------
    def emit(self, event: SearchEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    def note(self, message: str) -> None:
        self.emit(SearchEvent(kind="note", message=message, elapsed_s=self.deadline.elapsed()))

    # -- contention -----------------------------------------------------------------------
    def busy_now(self) -> bool:
        """Whether the machine watch saw outside load in the last few seconds."""
        return self.watch is not None and self.watch.busy_now()

    def burst_threads(self) -> int | None:
        """torch threads for a CPU burst starting now: fewer than the cores while outside
        processes hold some (``MachineWatch.burst_threads``); None: torch's default."""
        if self.watch is None or self.space.device_kind != "cpu":
            return None
        return self.watch.burst_threads()

    def disturbance(self, since: float, step_times: Sequence[float]) -> str:
        """Why a measurement that started at ``since`` (``time.monotonic``) is suspect:
        outside load during it, or step times that show interference; "" when clean."""
        from autotune.study.session.watch import disturbed_steps

        if self.watch is not None:
            load = self.watch.window(since)
            if load.busy:
                return load.describe()
        if disturbed_steps(step_times):
            ordered = sorted(step_times)
            return (
                f"erratic step times (slowest {ordered[-1]:.3g} s against a median of "
                f"{statistics.median(ordered):.3g} s): something else ran"
            )
        return ""
