"""The Optuna pieces: the pruner, the study's set-up check, the storages."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.core.errors import UsageError
from autotune.study import SlowConfigPruner
from autotune.study.storage.optuna_glue import open_study
from autotune.study.trials.records import SearchEvent
from autotune.testing.burst import FakeBurst, run

# -- pruning -----------------------------------------------------------------------------


def test_the_pruner_is_an_optuna_pruner_that_compares_with_the_best_so_far() -> None:
    best: list[float | None] = [None]
    pruner = SlowConfigPruner(lambda: best[0])
    assert isinstance(pruner, optuna.pruners.BasePruner)
    assert not pruner.should_prune({0: 1.0}, None)  # nothing to compare with yet
    assert pruner.should_prune({0: 10.0}, 100.0)  # under 1/9 of the best: one step says so
    assert not pruner.should_prune({0: 30.0}, 100.0)  # under 1/3, but a single step
    assert pruner.should_prune({0: 30.0, 1: 32.0}, 100.0)  # under 1/3 after two steps
    assert not pruner.should_prune({0: 30.0, 1: 40.0}, 100.0)  # its fastest step is not
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trial = study.ask()
    trial.report(10.0, 0)
    assert not trial.should_prune()
    best[0] = 100.0
    assert trial.should_prune()
    with pytest.raises(ValueError, match="ratio"):
        SlowConfigPruner(lambda: None, ratio=1.5)


@pytest.mark.parametrize(("slowdown", "steps_run"), [(30.0, 1), (4.0, 2)])
def test_a_slower_config_is_pruned_after_few_steps(
    tmp_path: Path, slowdown: float, steps_run: int
) -> None:
    # 30x slower: under 1/9 of the best after one step; 4x: under 1/3 after two.
    burst = FakeBurst(bf16_slowdown=slowdown)
    result = run(
        tmp_path,
        burst,
        trials=8,
        steps=10,
        knobs=["precision=fp32,bf16", "compile=off", "num_workers=0", "micro_batch=4,8"],
    )
    bf16 = [
        (c, n)
        for c, n in zip(burst.calls, burst.steps_reported, strict=True)
        if c.precision == "bf16"
    ]
    assert bf16, "the sampler never tried bf16"
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert pruned and all(t.state == "PRUNED" for t in pruned)
    assert all("pruned after" in t.reason for t in pruned if t.ran)
    # Every bf16 burst stopped after 1 or 2 of its 10 steps.
    assert all(n == steps_run for _, n in bf16)
    assert result.best is not None and result.best.config["precision"] == "fp32"


def test_a_study_made_for_another_search_is_refused(tmp_path: Path) -> None:
    run(tmp_path, FakeBurst(), trials=2, study="mine", output=None)
    with pytest.raises(UsageError, match=r"different search.*budget_bytes"):
        run(tmp_path, FakeBurst(), trials=2, study="mine", budget="2GB", output=None)


def test_a_study_that_did_not_record_how_it_measured_records_it_when_resumed(
    tmp_path: Path,
) -> None:
    # A study an older autotune made has no steps, warmup or seed in its set-up: resuming
    # it goes on (its trials are kept), saying so, and records this search's.
    run(tmp_path, FakeBurst(), trials=2, study="s", output=None)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/runs/s/study.db")
    setup = study.user_attrs["autotune"]
    assert (setup["steps"], setup["warmup"], setup["seed"]) == (4, 1, 0)
    older = {k: v for k, v in setup.items() if k not in ("steps", "warmup", "seed")}
    study.set_user_attr("autotune", older)
    events: list[SearchEvent] = []
    resumed = run(tmp_path, FakeBurst(), trials=3, study="s", steps=6, output=None,
                  progress=events.append)  # fmt: skip
    assert sum(1 for t in resumed.trials if t.ran) == 3
    notes = [e.message for e in events if e.kind == "note"]
    assert any("did not record its steps, warmup, seed" in n for n in notes), notes
    assert study.user_attrs["autotune"] == {**setup, "steps": 6}
    with pytest.raises(UsageError, match=r"different search \(steps: the study has 6, now 4\)"):
        run(tmp_path, FakeBurst(), trials=4, study="s", output=None)


def test_a_journal_storage_works(tmp_path: Path) -> None:
    url = f"journal:{tmp_path / 'journal.log'}"
    result = run(tmp_path, FakeBurst(), trials=3, storage=url, output=None)
    assert result.best is not None and (tmp_path / "journal.log").stat().st_size > 0
    again = run(tmp_path, FakeBurst(), trials=4, storage=url, output=None)
    assert sum(1 for t in again.trials if t.ran) == 4


@pytest.mark.parametrize(
    ("tail", "said"),
    [(b'{"op_code": 6, "worker_id": "x", "tri', "cut short"), (b"{}\n", "not a record")],
)
def test_a_search_resumes_a_journal_whose_last_write_was_torn(
    tmp_path: Path, tail: bytes, said: str
) -> None:
    # a disk-full search left a cut-off last line; the resumed search appended after it,
    # and no read of the study succeeded again (every trial lost). A last line of {}
    # stopped Optuna's replay itself (KeyError), before any mend
    path = tmp_path / "journal.log"
    url = f"journal:{path}"
    run(tmp_path, FakeBurst(), trials=3, storage=url, output=None)
    path.write_bytes(path.read_bytes() + tail)
    events: list[SearchEvent] = []
    again = run(tmp_path, FakeBurst(), trials=4, storage=url, output=None, progress=events.append)
    assert sum(1 for t in again.trials if t.ran) == 4
    notes = [e.message for e in events if e.kind == "note"]
    assert any(f"ended in a line that was {said}" in n for n in notes), notes
    third = run(tmp_path, FakeBurst(), trials=5, storage=url, output=None)  # it still reads
    assert sum(1 for t in third.trials if t.ran) == 5


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///", "names no database file"),
        ("sqlite://", "names no database file"),
        ("sqlite:///:memory:", "an in-memory SQLite study cannot be resumed or shared"),
        ("sqlite:///file::memory:?cache=shared", "in-memory SQLite"),
        ("journal:", "give the journal file"),
    ],
)
def test_storages_the_search_cannot_use_are_refused_before_any_trial(
    tmp_path: Path, url: str, expected: str
) -> None:
    burst = FakeBurst()
    with pytest.raises(UsageError, match=expected):
        run(tmp_path, burst, trials=2, storage=url, output=None)
    assert not burst.calls


def test_a_journal_in_a_missing_folder_is_refused_without_making_it(tmp_path: Path) -> None:
    url = f"journal:{tmp_path / 'no' / 'such' / 'journal.log'}"
    with pytest.raises(UsageError, match=r"the folder .*no/such' does not exist; create it"):
        run(tmp_path, FakeBurst(), trials=2, storage=url, output=None)
    assert not (tmp_path / "no").exists()
    with pytest.raises(UsageError, match="does not exist"):  # opening it directly too
        open_study(
            url,
            "s",
            setup={},
            pruner=optuna.pruners.NopPruner(),
            seed=0,
            n_startup_trials=None,
            space_size=1,
            trials=None,
        )
    assert not (tmp_path / "no").exists()


# -- running trials: one writer per study, dead owners failed -----------------------------


def _study_with_a_running_trial(tmp_path: Path, owner: dict[str, object] | None) -> optuna.Study:
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="s", direction="maximize"
    )
    trial = study.ask()
    trial.suggest_categorical("micro_batch", [1, 2, 4])
    if owner is not None:
        trial.set_user_attr("owner", owner)
    return study


def test_a_trial_whose_search_process_died_is_failed_and_its_config_queued(
    tmp_path: Path,
) -> None:
    from autotune.study.storage.optuna_glue import claim_running_trials
    from autotune.study.storage.ownership import trial_owner

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that ran this search and is dead now (kill -9, a crash)
    owner = {**trial_owner(), "pid": gone.pid}
    study = _study_with_a_running_trial(tmp_path, owner)
    params = study.trials[0].params
    claim_running_trials(study, "s")
    first, queued = study.trials
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["outcome"] == {
        "status": "interrupted",
        "reason": "its search process died",
    }
    assert queued.state == optuna.trial.TrialState.WAITING
    assert queued.system_attrs["fixed_params"] == params  # the config runs again


def test_a_study_another_live_search_is_running_is_refused(tmp_path: Path) -> None:
    from autotune.study.storage.optuna_glue import claim_running_trials
    from autotune.study.storage.ownership import trial_owner

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = {
            **trial_owner(),
            "pid": live.pid,
            "started": psutil.Process(live.pid).create_time(),
        }
        study = _study_with_a_running_trial(tmp_path, owner)
        with pytest.raises(UsageError, match=rf"is being searched right now by process {live.pid}"):
            claim_running_trials(study, "s")
    finally:
        live.kill()
        live.wait()
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING  # left alone
    claim_running_trials(study, "s")  # its owner is gone now: failed, config queued
    assert study.trials[0].state == optuna.trial.TrialState.FAIL


def test_a_trial_owned_on_another_machine_is_left_running(tmp_path: Path) -> None:
    from autotune.study.storage.optuna_glue import claim_running_trials

    owner = {"host": "another-machine", "pid": 1, "started": 0.0}
    study = _study_with_a_running_trial(tmp_path, owner)
    claim_running_trials(study, "s")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]


def test_a_resumed_search_fails_the_trial_a_killed_search_left_running(tmp_path: Path) -> None:
    from autotune.study.storage.ownership import trial_owner

    first = run(tmp_path, FakeBurst(), trials=3)
    study = optuna.load_study(study_name=first.study_name, storage=first.storage)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = study.ask()  # what kill -9 of a search leaves: a RUNNING trial forever
    killed.set_user_attr("owner", {**trial_owner(), "pid": gone.pid})
    run(tmp_path, FakeBurst(), trials=5)
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states[killed.number] == optuna.trial.TrialState.FAIL
    assert optuna.trial.TrialState.RUNNING not in states.values()


def test_a_second_search_on_a_study_a_live_search_holds_is_refused(tmp_path: Path) -> None:
    from autotune.study.storage.ownership import trial_owner

    first = run(tmp_path, FakeBurst(), trials=3)
    study = optuna.load_study(study_name=first.study_name, storage=first.storage)
    assert study.user_attrs["searching"] is None  # released when the search ended
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(live.pid).create_time()
        holder = {**trial_owner(), "pid": live.pid, "started": started}
        study.set_user_attr("searching", holder)  # e.g. verifying its winner: no trial RUNNING
        with pytest.raises(UsageError, match=rf"being searched right now by process {live.pid}"):
            run(tmp_path, FakeBurst(), trials=5)
    finally:
        live.kill()
        live.wait()
    again = run(tmp_path, FakeBurst(), trials=5)  # the holder died: the study is free
    assert again.study_name == first.study_name


def test_a_damaged_study_file_is_called_damaged(tmp_path: Path) -> None:
    """A garbage or truncated study.db was met with advice to give an Optuna storage URL:
    the URL was fine, the file is not."""
    from autotune.study.storage.optuna_glue import open_storage

    bad = tmp_path / "study.db"
    bad.write_bytes(b"garbage " * 100)
    with pytest.raises(UsageError) as refused:
        open_storage(f"sqlite:///{bad}")
    message = str(refused.value)
    assert f"{str(bad)!r} is damaged (SQLite: file is not a database)" in message
    assert "move it away" in message and "Give an Optuna storage URL" not in message
    assert bad.read_bytes() == b"garbage " * 100  # left as it was


def test_a_study_file_damaged_inside_is_called_damaged_when_read(tmp_path: Path) -> None:
    """A bad page deep inside study.db opens fine, and its first read was Optuna's
    "exception raised during the commit" and a 135-line traceback."""
    from autotune.study.storage.optuna_glue import open_storage

    db = tmp_path / "study.db"
    url = f"sqlite:///{db}"
    made = optuna.create_study(study_name="s", storage=open_storage(url))  # as a search
    made.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=30)
    with contextlib.closing(sqlite3.connect(db)) as connection:  # all of it in the file
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(db, "r+b") as damage:
        damage.seek(8192)
        damage.write(b"\xde\xad" * 2000)
    before = db.read_bytes()
    with pytest.raises(UsageError) as refused:
        storage = open_storage(url, create=False)
        optuna.load_study(study_name="s", storage=storage).trials  # noqa: B018
    assert f"{str(db)!r} is damaged (SQLite: database disk image is malformed)" in str(
        refused.value
    )
    assert db.read_bytes() == before


def test_a_study_file_too_deep_for_sqlite_says_so(tmp_path: Path) -> None:
    from autotune.study.storage.optuna_glue import SQLITE_MAX_PATH, open_storage

    deep = tmp_path.joinpath(*["d" * 200] * 4)
    deep.mkdir(parents=True)
    db = deep / "study.db"
    assert len(str(db)) > SQLITE_MAX_PATH
    with pytest.raises(UsageError) as refused:
        open_storage(f"sqlite:///{db}")
    assert f"its path is {len(str(db)):,} characters, longer than SQLite opens" in str(
        refused.value
    )


@pytest.mark.parametrize("raw", ["²", "99999999999999999999", "0", "-5", "abc", ""])
def test_a_heartbeat_variable_that_is_no_interval_leaves_the_default(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "²".isdigit() is true and int("²") a ValueError traceback; 10**20 overflowed in
    # Optuna's heartbeat thread
    from autotune.study.storage.optuna_glue import heartbeat_settings
    from autotune.study.storage.workers import ROOT_ENV, workers_root

    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", raw)
    assert heartbeat_settings() == (30, 120)
    monkeypatch.setenv(ROOT_ENV, raw)
    assert workers_root() is None
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "٣")  # a digit int() reads, but not ASCII
    assert heartbeat_settings() == (30, 120)
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "3")
    assert heartbeat_settings() == (3, 12)
