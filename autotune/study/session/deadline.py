"""The search's clock: when it started, its time limit, the deadline past it, and the time
the finalist race keeps out of the trials' share."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["DEADLINE", "MIN_BURST_S", "OVERRUN_SHARE", "Deadline"]

# The time limit is the user's: a search ends within it plus this share of it, the race and
# the preset included. Bursts and race rounds are held to half of that share; the other
# half is for killing a cut burst's processes and writing the preset.
OVERRUN_SHARE = 0.1
DEADLINE = f"the search's deadline (the time limit plus {OVERRUN_SHARE / 2:.0%})"
MIN_BURST_S = 1.0  # a burst with less time than this before the deadline is not started


def _no_reserve() -> float:
    return 0.0


def _always() -> bool:
    return True


@dataclass(kw_only=True)
class Deadline:
    """The time arithmetic of one search. ``limit_s``: the user's time limit in seconds
    (None: none; every answer is then None or "no limit"); ``started``: when it began to
    count (``clock``'s reading; None: now); ``overrun_share``: the share of the limit a
    search may run past it, half of which bursts and race rounds may use; ``clock``: the
    clock read (None: ``time.monotonic``, looked up at each reading, so that a test's
    virtual clock patches this module's ``time``).

    Only the race's reserve changes after construction (``keep_for_race``)."""

    limit_s: float | None
    started: float | None = None
    overrun_share: float = OVERRUN_SHARE
    clock: Callable[[], float] | None = field(default=None, repr=False)
    # (factories: a function as a field's default would be bound as a method)
    _reserve: Callable[[], float] = field(
        default_factory=lambda: _no_reserve, init=False, repr=False
    )
    _reserve_whole: Callable[[], bool] = field(
        default_factory=lambda: _always, init=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.now()

    def now(self) -> float:
        return time.monotonic() if self.clock is None else self.clock()

    def keep_for_race(self, reserve: Callable[[], float], *, whole: Callable[[], bool]) -> None:
        """Keep ``reserve()`` seconds, the finalist race's estimated time, out of the time
        for trials. While ``whole()`` is false (no config besides naive has a result), the
        reserve takes at most half the time left, so that a loaded machine (slow bursts, a
        large reserve) still measures the expert start rather than naive alone."""
        self._reserve, self._reserve_whole = reserve, whole

    # -- readings --------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds since the search started."""
        return self.now() - (self.started or 0.0)  # (set in __post_init__)

    def left(self) -> float | None:
        """Seconds left before the time limit (None: no limit), never below zero."""
        if self.limit_s is None:
            return None
        return max(0.0, self.limit_s - self.elapsed())

    def hard_left(self) -> float | None:
        """Seconds left before the search's deadline: the time limit plus half of
        ``overrun_share`` of it (None: no limit). Every burst, the trials' and the race's,
        is held to it (``burst_timeout``)."""
        if self.limit_s is None:
            return None
        return max(0.0, self.limit_s * (1.0 + self.overrun_share / 2) - self.elapsed())

    def reserve_s(self) -> float:
        """The race's reserve as estimated now (0 until ``keep_for_race``)."""
        return self._reserve()

    def for_trials(self) -> float | None:
        """Seconds left for trials: the time left less the race's reserve (capped at half
        the time left while ``keep_for_race``'s ``whole`` is false). None: no limit."""
        left = self.left()
        if left is None:
            return None
        reserve = self._reserve()
        if not self._reserve_whole():
            reserve = min(reserve, left / 2)
        return max(0.0, left - reserve)

    # -- rules -----------------------------------------------------------------------------
    def burst_timeout(self, timeout_s: float, *, expected_s: float | None = None) -> float | None:
        """The one deadline rule: a burst's ``timeout_s`` capped by the time left before the
        deadline, or None when the burst is not started: less than ``MIN_BURST_S`` is
        left (or than ``expected_s``, the burst's expected wall time, when that is less)."""
        left = self.hard_left()
        if left is None:
            return timeout_s
        least = MIN_BURST_S if not expected_s else min(MIN_BURST_S, expected_s)
        return None if left < least else min(timeout_s, left)

    def fits(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends before the deadline (a race round)."""
        left = self.hard_left()
        return left is None or seconds <= left
