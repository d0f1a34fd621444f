"""One search at a time on a study, claimed atomically: two `autotune search` processes
that reach the claim at the same moment (a barrier holds both just before it) never both
run; the other exits 2 with the clear message. Bursts and the machine are faked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from claim_race import claim_at_once
from fake_lm import FAKE_LM

from autotune.core.errors import UsageError
from autotune.study.storage import optuna_glue, ownership
from autotune.testing.burst import FakeBurst, run

RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from autotune.testing.burst import FakeBurst, cpu_profile
    import autotune.burst.supervisor, autotune.machine.hardware
    import autotune.study.session.api as api, autotune.study.trials.burst_threads
    from autotune.cli.main import main

    folder, me, storage, model = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    claim = api.exclusive_search

    def at_the_barrier(*args, **kwargs):
        (folder / f"ready-{me}").touch()
        while not (folder / "go").exists():
            time.sleep(0.001)
        return claim(*args, **kwargs)

    api.exclusive_search = at_the_barrier
    # as tests/study/conftest.py's no_settle: the other racer (and the other tests' worker)
    # is outside load, which a search otherwise waits 5 s to see stay or leave
    autotune.study.trials.burst_threads.LOAD_SETTLE_S = 0.0
    autotune.burst.supervisor.run_burst = FakeBurst()
    autotune.machine.hardware.probe = lambda: cpu_profile()
    sys.argv = ["autotune", "search", "--model", model, "--budget", "1GB", "--trials", "1",
                "--study", "raced", "--storage", storage, "--output", str(folder / "best.yaml")]
    main()
    """
)


def _racer(folder: Path, n: int, storage: str) -> subprocess.Popen[str]:
    tests = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", RACER, str(folder), str(n), storage, f"{FAKE_LM}:spec"],
        env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        # two searches in processes of their own (12-25 s on the 2-core CPU); the journal's
        # claim is guarded in the default tier by test_a_study_attribute_claim_has_one_winner
        pytest.param("journal", marks=pytest.mark.slow),
    ],
)
def test_two_searches_started_at_once_on_one_study_one_runs(tmp_path: Path, kind: str) -> None:
    if kind == "sqlite":
        storage = f"sqlite:///{tmp_path / 'study.db'}"
    else:
        storage = f"journal:{tmp_path / 'journal.log'}"
    opened = optuna_glue.open_storage(storage)
    optuna.create_study(study_name="raced", storage=opened, direction="maximize")
    racers = [_racer(tmp_path, n, storage) for n in (1, 2)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{n}").exists() for n in (1, 2)):
        assert time.monotonic() < deadline and all(r.poll() is None for r in racers), [
            r.communicate() for r in racers if r.poll() is not None
        ]
        time.sleep(0.01)
    (tmp_path / "go").touch()  # both wait at the claim: now
    outputs = [r.communicate(timeout=120) for r in racers]
    codes = sorted(r.returncode for r in racers)
    assert codes == [0, 2], outputs
    loser = next(err for r, (_, err) in zip(racers, outputs, strict=True) if r.returncode == 2)
    assert "is being searched right now by" in loser and "Traceback" not in loser, loser
    assert (tmp_path / "best.yaml").is_file()


def test_a_database_server_study_is_claimed_in_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a file to lock (PostgreSQL, MySQL), the claim is a row inserted against the
    attribute table's unique key: a search that finds another's claim, with one of the
    study's trials running under it, does not run; once nothing runs under it (that
    search died on its machine), it is taken over."""
    monkeypatch.setattr(ownership, "storage_file", lambda url: None)
    first = run(tmp_path, FakeBurst(), trials=3)  # a study to claim
    study = optuna.load_study(study_name=first.study_name, storage=first.storage)
    other = {"host": "elsewhere", "pid": 4242, "started": 0.0}
    assert ownership.claim_study_attr(study, ownership.SEARCHING, other) == other
    running = study.ask()
    study._storage.set_trial_user_attr(running._trial_id, "owner", other)
    with (
        pytest.raises(UsageError, match="being searched right now by process 4242 on elsewhere"),
        ownership.exclusive_search(study, first.study_name, storage=first.storage),
    ):
        pass
    assert (
        study._storage.get_study_system_attrs(study._study_id)[ownership.SEARCHING] == other
    )  # the holder's claim is left alone
    study.tell(running, state=optuna.trial.TrialState.FAIL)
    with ownership.exclusive_search(study, first.study_name, storage=first.storage):
        assert (
            study._storage.get_study_system_attrs(study._study_id)[ownership.SEARCHING]["pid"]
            == os.getpid()
        )
    assert ownership.SEARCHING not in study._storage.get_study_system_attrs(
        study._study_id
    )  # released


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_study_attribute_claim_has_one_winner(tmp_path: Path, kind: str) -> None:
    """Eight threads, each with its own connection, claim one key at once: one wins, and
    every thread reads that winner back."""
    url = f"sqlite:///{tmp_path / 's.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'j'}"
    holders = claim_at_once(url)
    assert len(holders) == 8 and all(h == holders[0] for h in holders), holders


def test_a_study_file_stays_locked_while_searched_and_is_freed_after(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=storage)
    with ownership.exclusive_search(study, "s", storage=storage):
        with ownership._file_lock(storage, "s") as held:  # another open file description
            assert held is False
        with ownership._file_lock(storage, "other-study") as held:
            assert held is True  # one lock per study, not per file
    with ownership._file_lock(storage, "s") as held:
        assert held is True
    assert study.user_attrs["searching"] is None
