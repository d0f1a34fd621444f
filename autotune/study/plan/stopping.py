"""Whether the search stops now, and why: its limits, the time left for trials, a space
with every config measured, a sampler that converged. The caller that asks decides."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.study.session.context import SearchContext
    from autotune.study.trials.trial_log import TrialLog

__all__ = ["MAX_CONSECUTIVE_SKIPS", "stop_reason"]

MAX_CONSECUTIVE_SKIPS = 100  # the sampler keeps proposing known configs: it has converged


def stop_reason(
    context: SearchContext, log: TrialLog, *, next_fits: Callable[[], bool] | None = None
) -> str:
    """Why the search should stop now, or "" to go on. ``next_fits``: whether a queued
    config is expected to finish in the time left for trials (``Planner.next_that_fits``),
    asked only when less time than a typical burst is left, which is then no reason to
    stop. (A budget too small is the planner's own reason: ``Planner.stop_reason``.)"""
    limits, deadline = context.limits, context.deadline
    left = log.trials_left()
    if left is not None and left <= 0:
        return f"reached {limits.trials} measured trials"
    # The time limit ends a search only once it measured something (the naive config).
    time_left = deadline.for_trials() if log.measured() else None
    if time_left is not None and time_left <= 0:
        if deadline.left():
            return (
                f"the time limit ({limits.time_limit_s:g} s) leaves what the "
                f"finalist race needs ({deadline.reserve_s():.0f} s)"
            )
        return f"reached the time limit ({limits.time_limit_s:g} s)"
    if time_left is not None:
        walls = [r.wall_s for r in log.records.values() if r.ran and r.wall_s and r.feasible]
        typical = statistics.median(walls) if walls else 0.0
        if time_left < typical and not (next_fits is not None and next_fits()):
            return (
                f"the time limit ({limits.time_limit_s:g} s) leaves {time_left:.0f} s, "
                f"less than a typical burst ({typical:.0f} s)"
            )
    if len(log.by_key) >= context.space.size():
        return f"every config of the space ({context.space.size()}) has a result"
    if log.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
        return (
            f"the sampler proposed only known or skipped configs for "
            f"{MAX_CONSECUTIVE_SKIPS} trials in a row (converged)"
        )
    return ""
