"""A study storage that fails mid-search (locked, full disk) is a one-paragraph error; a
SQLite study locked for a moment is waited for."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc

from autotune.burst.result import BurstResult
from autotune.core.errors import AutotuneError
from autotune.study.storage.optuna_glue import (
    SQLITE_BUSY_TIMEOUT_S,
    open_storage,
    storage_failures,
    storage_problem,
)
from autotune.testing.burst import FakeBurst, run


def _optuna_like_failure() -> None:
    """What optuna 4 raises when a trial's commit fails: its StorageInternalError, then
    "Should not reach." while marking the trial FAIL through the same storage."""
    try:
        try:
            raise sqlalchemy.exc.OperationalError(
                "UPDATE trials", {}, sqlite3.OperationalError("database or disk is full")
            )
        except sqlalchemy.exc.OperationalError as e:
            raise optuna.exceptions.StorageInternalError("An exception is raised") from e
    except optuna.exceptions.StorageInternalError:
        raise AssertionError("Should not reach.")  # noqa: B904 (as optuna does)


def test_the_database_s_own_words_are_found() -> None:
    with pytest.raises(AssertionError) as info:
        _optuna_like_failure()
    assert storage_problem(info.value) == "database or disk is full"
    assert storage_problem(ValueError("other")) is None
    try:  # a journal study's write on a full disk, as Optuna's trial loop raises it
        try:
            raise OSError(28, "No space left on device", "study.log")
        except OSError:
            raise AssertionError("Should not reach.")  # noqa: B904
    except AssertionError as wrapped:
        said = storage_problem(wrapped)
    assert said == "[Errno 28] No space left on device: 'study.log'"


def test_a_failed_storage_becomes_an_autotune_error() -> None:
    full = r"stopped taking writes \(database or disk is full\)"
    with pytest.raises(AutotuneError, match=full), storage_failures("sqlite:///s.db"):
        _optuna_like_failure()
    # anything else goes through
    with pytest.raises(ValueError), storage_failures("sqlite:///s.db"):
        raise ValueError("not the storage")


@pytest.mark.parametrize(
    ("query", "wait_ms"), [("", SQLITE_BUSY_TIMEOUT_S * 1000), ("?timeout=2", 2000)]
)
def test_a_sqlite_study_waits_for_a_lock_unless_its_url_says_how_long(
    tmp_path: Path, query: str, wait_ms: float
) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}{query}")
    with storage._backend.engine.connect() as connection:
        busy = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
    assert busy == wait_ms
    assert SQLITE_BUSY_TIMEOUT_S > 5  # longer than SQLite's own wait through SQLAlchemy


# -- a real lock on a SQLite study --------------------------------------------------------


@dataclass
class LockingBurst(FakeBurst):
    """A fake burst that, as the ``at``-th trial's burst ends, has another connection take
    the study file's write lock (``BEGIN EXCLUSIVE``, as a sqlite3 shell or another
    worker would) and hold it ``hold_s`` seconds: the trial's outcome is then written
    under the lock."""

    db: Path = Path()
    hold_s: float = 0.0
    at: int = 3
    held: list[float] = field(default_factory=list)  # when the lock was taken, and freed

    def __call__(self, *args: Any, **kwargs: Any) -> BurstResult:
        result = super().__call__(*args, **kwargs)
        if len(self.calls) == self.at and not self.held:
            locked = threading.Event()
            threading.Thread(target=self._hold, args=(locked,), daemon=True).start()
            assert locked.wait(10)
        return result

    def _hold(self, locked: threading.Event) -> None:
        connection = sqlite3.connect(self.db, isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        self.held.append(time.monotonic())
        locked.set()
        time.sleep(self.hold_s)
        connection.execute("COMMIT")
        connection.close()
        self.held.append(time.monotonic())


# a lock held 6 s through a search (7-9 s on the 2-core CPU); in the default tier the wait
# set on the connection is checked by test_a_sqlite_study_waits_for_a_lock_unless_its_url_
# says_how_long, and that it governs a search by test_a_lock_that_outlasts_the_wait_...
@pytest.mark.slow
def test_a_search_waits_out_a_lock_longer_than_sqlite_s_default_wait(tmp_path: Path) -> None:
    # SQLite's own wait (5 s through SQLAlchemy) ended this search at its next write.
    burst = LockingBurst(db=tmp_path / "s.db", hold_s=6.0)
    storage = f"sqlite:///{burst.db}"
    result = run(tmp_path, burst, trials=5, storage=storage, output=None)
    taken, freed = burst.held
    assert freed - taken >= 6.0  # the search wrote through a lock held that long
    assert sum(1 for t in result.trials if t.ran) == 5 and result.best is not None


def test_a_lock_that_outlasts_the_wait_ends_the_search_in_one_paragraph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("autotune.study.storage.optuna_glue.SQLITE_BUSY_TIMEOUT_S", 0.2)
    burst = LockingBurst(db=tmp_path / "s.db", hold_s=1.0)
    storage = f"sqlite:///{burst.db}"
    with pytest.raises(AutotuneError) as info:
        run(tmp_path, burst, trials=5, storage=storage, output=None, study="s")
    message = str(info.value)
    assert "stopped taking writes (database is locked)" in message and "\n" not in message
    assert "rerun the same command to resume" in message
    while len(burst.held) < 2:  # the lock freed: what the search wrote before is there
        time.sleep(0.05)
    done = optuna.load_study(study_name="s", storage=storage).get_trials(
        states=(optuna.trial.TrialState.COMPLETE,)
    )
    assert len(done) >= 2
