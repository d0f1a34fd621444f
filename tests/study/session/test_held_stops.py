"""A stop signal that lands while Optuna stores a trial's outcome stops the search cleanly.

Optuna's ``_run_trial`` stores the outcome in a ``try`` whose ``finally`` reads a name the
``try`` had not set yet when a ``KeyboardInterrupt`` (Ctrl-C, or the CLI's handler for
SIGTERM and SIGHUP) escaped it: the search ended in ``UnboundLocalError`` with a
traceback (CI, the real-burst kill suite, seed 20, kill 15). The search now holds stop
signals outside its objective (``HeldStops``) and handles them once the outcome is stored.

A stop that lands inside a storage call (a trial's intermediate value written as its burst
runs) waits for the call to end (``stops_held``): a ``KeyboardInterrupt`` inside
SQLAlchemy's session left it unusable, and the write marking the trial failed then failed
too ("the study storage stopped taking writes", exit 1; the real-burst kill suite, seed 20).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from autotune.core.signals import HeldStops, StopSignal, stop_signals_raise, stops_held
from autotune.study.storage.optuna_glue import open_storage, quiet_optuna, storage_failures
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
    with stop_signals_raise():
        yield
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


# -- a stop inside a storage call ------------------------------------------------------------


def _stop_inside_the_next_call(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """``arm()``: the next storage call gets SIGTERM inside the session ``close`` Optuna
    runs after each call, right after SQLAlchemy killed the session's identity map and
    before it made a new one: a ``KeyboardInterrupt`` there leaves the session unusable
    ("cannot be converted to 'persistent' state, as this identity map is no longer
    valid"), as it did in the real-burst kill suite."""
    from sqlalchemy.orm import identity

    kill = identity.IdentityMap._kill
    armed: list[bool] = []

    def killing(self: identity.IdentityMap) -> None:
        kill(self)
        if armed:
            armed.clear()
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(identity.IdentityMap, "_kill", killing)
    return lambda: armed.append(True)


def test_a_stop_inside_a_trial_s_storage_write_waits_for_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_handlers: None
) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="s", direction="maximize")
    arm = _stop_inside_the_next_call(monkeypatch)

    def objective(trial: optuna.Trial) -> float:  # as the search's: its burst reports steps
        for step in range(3):
            if trial.number == 1 and step == 1:
                arm()
            trial.report(float(step), step)
        return 1.0

    with pytest.raises(StopSignal), storage_failures(url), quiet_optuna(), HeldStops() as held:
        study.optimize(
            held.let_through(objective), n_trials=3, callbacks=[held.replay], gc_after_trial=False
        )
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL]
    assert trials[1].intermediate_values == {0: 0.0, 1: 1.0}  # the write it landed in is kept


def test_a_stop_inside_a_storage_write_outside_the_trials_waits_for_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_handlers: None
) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="s")
    _stop_inside_the_next_call(monkeypatch)()
    with pytest.raises(StopSignal):
        study.set_user_attr("ledger", 1)  # as the search's, after its trials
    study.set_user_attr("searching", None)  # the clean-up on the way out still writes
    assert optuna.load_study(study_name="s", storage=url).user_attrs == {
        "ledger": 1,
        "searching": None,
    }
    assert signal.getsignal(signal.SIGTERM).__name__ == "handler"  # the CLI's, restored


def test_a_stop_held_in_a_call_is_handled_after_it_even_when_it_raises(
    cli_handlers: None,
) -> None:
    @stops_held
    def failing() -> None:
        signal.raise_signal(signal.SIGTERM)
        raise ValueError("the storage's own error, which its caller may catch")

    with pytest.raises(StopSignal) as stopped:  # outside a HeldStops: its own
        failing()
    assert isinstance(stopped.value.__context__, ValueError)
    with HeldStops() as held, held.released(), pytest.raises(StopSignal):  # in a trial
        failing()
    with HeldStops() as held:  # in Optuna's bookkeeping: held on, until the replay
        with pytest.raises(ValueError):
            failing()
        with pytest.raises(StopSignal):
            held.replay()
