"""A fake machine watch for the study's tests (a search under load without real load) and
``slowed``, a burst's figures as a slower machine would measure them: the contention
tests (session/test_contention.py) and the race's (race/) use both. This folder is on
sys.path through tests/study/conftest.py, so every room imports it by name."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from autotune.burst.result import BurstResult
from autotune.study.session.watch import Load


@dataclass
class FakeWatch:
    """Busy while ``loaded`` is set; a window is busy when a burst ran in it loaded."""

    loaded: bool = False
    busy_marks: list[float] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic()

    @contextlib.contextmanager
    def burst(self) -> Iterator[None]:
        yield
        if self.loaded:
            self.busy_marks.append(time.monotonic())

    def window(self, since: float, until: float | None = None) -> Load:
        end = time.monotonic() if until is None else until
        busy = any(since <= t <= end for t in self.busy_marks)
        cores = 1.0 if busy else 0.0
        return Load(outside_cores_mean=cores, outside_cores_max=cores, samples=3, busy=busy)

    def busy_now(self, last_s: float = 5.0) -> bool:
        return self.loaded

    def burst_threads(self) -> int | None:
        return 1 if self.loaded else None  # one of the 2 cores left

    def total(self) -> Load:
        return self.window(0.0)


def slowed(result: BurstResult, factor: float) -> BurstResult:
    """``result`` as a machine ``factor`` times slower would have measured it."""
    data = {**result.to_dict(), "tokens_per_s": (result.tokens_per_s or 0.0) / factor}
    data["step_times_s"] = tuple(data.get("step_times_s") or ())
    data["losses"] = tuple(data.get("losses") or ())
    return BurstResult(**data)
