"""A stop signal that lands while Optuna stores a trial's outcome stops the search cleanly.

Optuna's ``_run_trial`` stores the outcome in a ``try`` whose ``finally`` reads a name the
``try`` had not set yet when a ``KeyboardInterrupt`` (Ctrl-C, or the CLI's handler for
SIGTERM and SIGHUP) escaped it: the search ended in ``UnboundLocalError`` with a
traceback (CI, the real-burst kill suite, seed 20, kill 15). The search now holds stop
signals outside its objective (``HeldStops``) and handles them once the outcome is stored.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.storages import RDBStorage

from autotune.cli.search import StopSignal, _stop_signals_as_interrupt
from autotune.core.signals import HeldStops
from autotune.testing.burst import FakeBurst, run


@pytest.fixture
def cli_handlers() -> Iterator[None]:
    """The CLI's handlers for SIGTERM and SIGHUP, and Python's own for Ctrl-C, whatever
    this process inherited: under ``nohup`` or as a background job of a script (CI),
    SIGHUP and SIGINT arrive ignored, and the CLI rightly leaves an ignored signal ignored;
    a blocked one would stay pending."""
    stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    inherited = {sig: signal.getsignal(sig) for sig in stops}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    restore = _stop_signals_as_interrupt()
    yield
    restore()
    for sig, handler in inherited.items():
        signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _signal_while_storing(
    monkeypatch: pytest.MonkeyPatch, sig: int, at: int
) -> Callable[[], int | None]:
    """Send ``sig`` to this process right after the ``at``-th trial outcome is written,
    still inside Optuna's bookkeeping; returns the number of the trial it landed in."""
    original = RDBStorage.set_trial_state_values
    landed: dict[str, int] = {}

    def storing(self: RDBStorage, trial_id: int, state: Any, values: Any = None) -> bool:
        written = original(self, trial_id, state, values)
        if state.is_finished():
            landed["count"] = landed.get("count", 0) + 1
            if landed["count"] == at:
                landed["trial"] = self.get_trial_number_from_id(trial_id)
                signal.raise_signal(sig)
        return written

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", storing)
    return lambda: landed.get("trial")


@pytest.mark.parametrize(
    ("sig", "raised"), [(signal.SIGTERM, StopSignal), (signal.SIGINT, KeyboardInterrupt)]
)
def test_a_stop_while_an_outcome_is_stored_ends_the_search_cleanly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_handlers: None,
    sig: int,
    raised: type[BaseException],
) -> None:
    landed = _signal_while_storing(monkeypatch, sig, at=3)
    with pytest.raises(raised) as stopped:
        run(tmp_path, FakeBurst(), trials=9, knobs=["compile=off"])
    assert not isinstance(stopped.value.__context__, UnboundLocalError)
    storage = f"sqlite:///{next((tmp_path / 'runs').glob('*/study.db'))}"
    trials = optuna.load_study(study_name=None, storage=storage).trials
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    number = landed()
    assert number is not None
    assert trials[number].state == optuna.trial.TrialState.COMPLETE  # its outcome was kept
    later = {t.state for t in trials[number + 1 :]}
    assert later <= {optuna.trial.TrialState.WAITING}, "a trial started after the stop"


def test_held_stops_records_outside_and_raises_inside(cli_handlers: None) -> None:
    with pytest.raises(StopSignal), HeldStops() as held:
        signal.raise_signal(signal.SIGTERM)  # held: nothing happens yet
        reached = True
        with held.released():  # the held one first
            pytest.fail("released() did not handle the held signal")
    assert reached
    with HeldStops() as held, pytest.raises(StopSignal), held.released():
        signal.raise_signal(signal.SIGHUP)  # inside: at once
    with pytest.raises(StopSignal), HeldStops():
        signal.raise_signal(signal.SIGTERM)  # still held when the block ends: handled then
    assert signal.getsignal(signal.SIGTERM).__name__ == "handler"  # the CLI's, restored


def test_held_stops_adds_nothing_to_an_exception_on_its_way_out(cli_handlers: None) -> None:
    with pytest.raises(ValueError), HeldStops():
        signal.raise_signal(signal.SIGTERM)
        raise ValueError("the search's own error")


def test_held_stops_leaves_an_ignored_signal_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with HeldStops() as held:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            with held.released():
                signal.raise_signal(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)
