"""The search's tests: fake watches say at once whether load is there, so a burst that
sees load does not wait the real ``LOAD_SETTLE_S`` to see whether it stays; ``clock``, a
virtual clock for time-limited searches whose fake bursts stand for seconds of work."""

from __future__ import annotations

import pytest
from virtual_clock import VirtualClock, install


@pytest.fixture(autouse=True)
def no_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.study.trials.burst_threads.LOAD_SETTLE_S", 0.0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The search's clock for the test, moved on by ``clock.sleep`` (tests/virtual_clock.py)."""
    return install(monkeypatch)
