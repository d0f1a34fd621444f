"""A journal study's torn last record: cut off (and kept) before a search appends, so one
write that did not end (a full disk, a kill mid-write) no longer makes the whole study
unreadable at the next append."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from autotune.study.storage.journal_tail import TORN_SUFFIX, mend_journal_tail

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _journal_with_trials(path: Path, n: int = 3) -> None:
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="s", storage=storage, load_if_exists=True)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=n)


def _trials(path: Path) -> int:
    storage = JournalStorage(JournalFileBackend(str(path)))
    return len(optuna.load_study(study_name="s", storage=storage).trials)


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        (b'{"op_code": 5, "worker_id": "w", "trial_id": 0, "st', "cut short"),
        (b"garbage\n", "not a record"),
    ],
)
def test_a_bad_last_line_is_cut_off_and_kept(tmp_path: Path, tail: bytes, said: str) -> None:
    path = tmp_path / "study.log"
    _journal_with_trials(path)
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    note = mend_journal_tail(path)
    assert note is not None and said in note and TORN_SUFFIX in note
    assert path.read_bytes() == whole
    kept = (tmp_path / f"study.log{TORN_SUFFIX}").read_bytes()
    assert kept.rstrip(b"\n") == tail.rstrip(b"\n")
    _journal_with_trials(path, 2)  # a search's appends after it, and the study reads
    assert _trials(path) == 5


def test_without_the_mend_an_append_after_a_torn_line_loses_the_study(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    _journal_with_trials(path)
    path.write_bytes(path.read_bytes() + b'{"op_code": 5, "tr')
    assert _trials(path) == 3  # Optuna's reader skips a bad last line...
    backend = JournalFileBackend(str(path))
    for _ in range(2):  # the first joins the torn line; the second leaves it not last
        backend.append_logs([{"op_code": 0, "worker_id": "w"}])
    with pytest.raises(ValueError):  # ...but not one that is no longer last
        _trials(path)


def test_a_whole_journal_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    assert mend_journal_tail(path) is None  # none yet
    path.write_bytes(b"")
    assert mend_journal_tail(path) is None
    _journal_with_trials(path)
    before = path.read_bytes()
    assert mend_journal_tail(path) is None
    assert path.read_bytes() == before
    assert not (tmp_path / f"study.log{TORN_SUFFIX}").exists()


def test_a_journal_of_one_torn_line_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    path.write_bytes(b'{"op_code": 0, "wor')
    assert mend_journal_tail(path) is not None
    assert path.read_bytes() == b""


def test_a_journal_damaged_inside_is_called_damaged_not_a_wrong_url(tmp_path: Path) -> None:
    # "Give an Optuna storage URL (sqlite:///...)": the URL was fine, a line inside was not
    from autotune.core.errors import UsageError
    from autotune.study.storage.optuna_glue import open_storage

    path = tmp_path / "study.log"
    _journal_with_trials(path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(UsageError) as refused:
        open_storage(f"journal:{path}", create=False)
    assert f"{str(path)!r} is damaged (a line inside it is no journal record" in str(refused.value)
    assert "Give an Optuna storage URL" not in str(refused.value)


def test_an_append_cuts_a_torn_line_a_killed_worker_left(tmp_path: Path) -> None:
    # the other workers of a shared study go on appending after one is killed mid-write:
    # their next record was glued onto the torn bytes, and the one after made the study
    # unreadable
    from autotune.study.storage.journal_tail import MendingJournalBackend

    path = tmp_path / "study.log"
    _journal_with_trials(path)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 6, "worker_id": "killed", "tri')
    storage = JournalStorage(MendingJournalBackend(str(path)))
    optuna.load_study(study_name="s", storage=storage).optimize(
        lambda t: t.suggest_float("x", 0, 1), n_trials=2
    )
    assert _trials(path) == 5
    assert (tmp_path / f"study.log{TORN_SUFFIX}").read_bytes() == (
        b'{"op_code": 6, "worker_id": "killed", "tri\n'
    )
    before = path.read_bytes()
    MendingJournalBackend(str(path)).append_logs([{"op_code": 0, "worker_id": "w"}])
    assert path.read_bytes().startswith(before)  # a whole journal: nothing cut


@pytest.mark.parametrize("line", [b"[1]\n", b"{}\n", b'"x"\n'])
def test_a_last_line_of_json_that_is_no_record_is_cut_too(tmp_path: Path, line: bytes) -> None:
    # valid JSON, but Optuna's replay stopped on it with a TypeError or KeyError
    path = tmp_path / "study.log"
    _journal_with_trials(path)
    path.write_bytes(path.read_bytes() + line)
    assert "not a record" in (mend_journal_tail(path) or "")
    assert _trials(path) == 3


def test_a_stop_while_waiting_for_the_lock_is_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Optuna's acquire(), stopped by Ctrl-C while it waited out a killed writer's lock,
    # raised RuntimeError("did not possess lock") from its own clean-up: a traceback
    from autotune.study.storage.journal_tail import _held

    class Lock:
        released = False

        def acquire(self) -> bool:
            try:
                raise KeyboardInterrupt
            except BaseException:
                raise RuntimeError("did not possess lock")  # noqa: B904

        def release(self) -> None:
            self.released = True

    with pytest.raises(KeyboardInterrupt), _held(Lock()):
        pass
