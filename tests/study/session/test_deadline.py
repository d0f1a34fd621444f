"""The search's time arithmetic (study/deadline.py) on a fake clock."""

from __future__ import annotations

import pytest

from autotune.study.session.deadline import MIN_BURST_S, Deadline


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _deadline(limit_s: float | None, *, share: float = 0.1) -> tuple[Deadline, FakeClock]:
    clock = FakeClock()
    return Deadline(limit_s=limit_s, overrun_share=share, clock=clock), clock


def test_the_time_left_counts_from_the_start_and_stops_at_zero() -> None:
    deadline, clock = _deadline(100.0)
    assert deadline.started == 1000.0 and deadline.left() == 100.0
    clock.t += 30.0
    assert deadline.elapsed() == 30.0 and deadline.left() == 70.0
    clock.t += 200.0
    assert deadline.left() == 0.0


def test_the_deadline_is_the_limit_plus_half_the_overrun_share() -> None:
    deadline, clock = _deadline(100.0, share=0.2)  # the deadline: 110 s
    clock.t += 90.0
    assert deadline.hard_left() == pytest.approx(20.0)
    assert deadline.fits(20.0) and not deadline.fits(20.5)
    assert deadline.burst_timeout(600.0) == pytest.approx(20.0)  # capped by the deadline
    assert deadline.burst_timeout(5.0) == 5.0
    clock.t += 20.0 - MIN_BURST_S / 2  # under MIN_BURST_S left: not started
    assert deadline.burst_timeout(600.0) is None
    assert deadline.burst_timeout(600.0, expected_s=0.1) == pytest.approx(MIN_BURST_S / 2)


def test_the_race_reserve_comes_out_of_the_time_for_trials() -> None:
    deadline, clock = _deadline(100.0)
    assert deadline.for_trials() == 100.0 and deadline.reserve_s() == 0.0
    whole = [False]
    deadline.keep_for_race(lambda: 80.0, whole=lambda: whole[0])
    assert deadline.for_trials() == 50.0  # naive alone measured: half the time left at most
    whole[0] = True
    assert deadline.for_trials() == 20.0 and deadline.reserve_s() == 80.0
    clock.t += 30.0
    assert deadline.for_trials() == 0.0  # 70 s left, all the race's


def test_without_a_limit_nothing_is_capped() -> None:
    deadline, clock = _deadline(None)
    deadline.keep_for_race(lambda: 80.0, whole=lambda: True)
    clock.t += 10**6
    assert deadline.left() is None and deadline.hard_left() is None
    assert deadline.for_trials() is None and deadline.fits(10**9)
    assert deadline.burst_timeout(600.0) == 600.0


def test_the_clock_is_read_at_each_call() -> None:
    deadline = Deadline(limit_s=10.0, started=0.0, clock=lambda: 4.0)
    assert deadline.started == 0.0 and deadline.left() == 6.0
