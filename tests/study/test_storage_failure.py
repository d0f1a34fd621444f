"""A study storage that fails mid-search (locked, full disk) is a one-paragraph error."""

from __future__ import annotations

import sqlite3

import optuna
import pytest
import sqlalchemy.exc

from autotune.core.errors import AutotuneError
from autotune.study.optuna_glue import storage_failures, storage_problem


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


def test_a_failed_storage_becomes_an_autotune_error() -> None:
    full = r"stopped taking writes \(database or disk is full\)"
    with pytest.raises(AutotuneError, match=full), storage_failures("sqlite:///s.db"):
        _optuna_like_failure()
    # anything else goes through
    with pytest.raises(ValueError), storage_failures("sqlite:///s.db"):
        raise ValueError("not the storage")
