"""A virtual clock for the search's time-limited tests.

A fake burst that stands for seconds of compiling or stepping calls ``clock.sleep(s)``
instead of ``time.sleep(s)``: the search's limits, caps and reserves see those seconds go
by at once, and the test does not wait them. Real time still passes under it, as the
search's own work (the study, the sampler) does on a real machine.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

# the modules that keep the search's time; workers.py is left out: its polls would spin
SEARCH_CLOCK_MODULES = (
    "session.api",
    "session.deadline",
    "trials.objective",
    "race.finalist_race",
)


class VirtualClock:
    """``time`` with a ``sleep`` that moves ``monotonic`` forward at once; every other
    name is the ``time`` module's."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        self.skipped += max(0.0, seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def install(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """A ``VirtualClock`` as the search's clock for the test. (``Deadline.started`` is
    read when the search starts, before any sleep: the same instant on both clocks.)"""
    clock = VirtualClock()
    for module in SEARCH_CLOCK_MODULES:
        monkeypatch.setattr(f"autotune.study.{module}.time", clock)
    return clock
