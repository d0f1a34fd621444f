"""core.signals.time_bound: what waits past its bound is stopped with the caller's error."""

from __future__ import annotations

import signal
import time

import pytest

from autotune.core.signals import time_bound


class Late(Exception):
    pass


def test_a_wait_past_the_bound_raises_the_error_and_the_alarm_is_put_back() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(Late), time_bound(0.2, Late):
        time.sleep(30)  # unbounded, the test would wait half a minute and then fail below
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no alarm left to fire


def test_no_bound_and_a_quick_body_leave_everything_as_it_was() -> None:
    with time_bound(None, Late):
        time.sleep(0.01)
    with time_bound(5, Late):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
