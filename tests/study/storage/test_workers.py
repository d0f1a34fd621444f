"""Two workers on one study, on a real PostgreSQL server and on a journal file:
together they finish the study's trials with no config measured twice and one preset; a
worker killed with SIGKILL loses no finished trial, its running trial is failed and its
config queued again, and the other worker completes the study. The bursts are fakes
(``_worker_script.py``) that log each trial's burst, so the test sees every measurement.

The PostgreSQL server is the Debian package's, started in a temporary folder on a local
socket (``initdb``, ``pg_ctl``; as an unprivileged user when the test runs as root, which
initdb refuses). Without initdb or psycopg2 those tests skip; CI installs both."""

from __future__ import annotations

import collections
import glob
import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups"),
]

N = 6  # each of the two workers' share: the study runs 2N measured trials
SCRIPT = Path(__file__).with_name("_worker_script.py")
INITDB = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


def _postgres_missing() -> str:
    if not INITDB and not shutil.which("initdb"):
        return "no PostgreSQL server (apt-get install postgresql; CI installs it)"
    if importlib.util.find_spec("psycopg2") is None:
        return 'no psycopg2 (pip install "autotune-train[distributed]"; CI installs it)'
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser (initdb refuses root)"
    return ""


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL server of this test module: the URL prefix of its databases."""
    if reason := _postgres_missing():
        pytest.skip(reason)
    bin_dir = Path(INITDB[-1]).parent if INITDB else Path(shutil.which("initdb") or "").parent
    top = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    top.chmod(0o755)  # the server's user must reach its folder
    folder = top / "pg"
    folder.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as nobody
        shutil.chown(folder, user="nobody")
        as_user = ["runuser", "-u", "nobody", "--"]
    data = folder / "data"
    run = [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "autotune"]
    subprocess.run([*run, "--no-sync"], check=True, capture_output=True)
    options = f"-k {folder} -c listen_addresses='' -F"
    start = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-w"]
    subprocess.run([*start, "-l", str(folder / "log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://autotune@/{{db}}?host={folder}"
    finally:
        stop = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(stop, check=False, capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


def _database(postgres: str, name: str) -> str:
    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres.format(db="postgres"), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return postgres.format(db=name)


@pytest.fixture(params=["postgresql", "journal"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "journal":
        return f"journal:{tmp_path / 'study.log'}"
    return _database(request.getfixturevalue("postgres"), tmp_path.name.lower()[:60])


def _env(**extra: str) -> dict[str, str]:
    tests = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "AUTOTUNE_HEARTBEAT_S": "1", **extra}


def _worker(folder: Path, storage: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(folder), storage, str(2 * N), *args],
        env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _bursts(folder: Path) -> list[dict[str, Any]]:
    log = folder / "bursts.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _study(storage: str) -> optuna.Study:
    from autotune.study.storage.optuna_glue import open_storage

    return optuna.load_study(study_name="shared", storage=open_storage(storage))


def _measured(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    def ran(t: optuna.trial.FrozenTrial) -> bool:
        outcome = t.user_attrs.get("outcome") or {}
        return bool(outcome.get("ran")) and outcome.get("status") != "interrupted"

    return [t for t in study.get_trials() if t.state.is_finished() and ran(t)]


def _measuring(study: optuna.Study, pid: int) -> int | None:
    """The trial whose burst process ``pid`` runs now (it has claimed its config)."""
    for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner") or {}
        if owner.get("pid") == pid and (t.user_attrs.get("claim") or {}).get("measure"):
            return t.number
    return None


def _finished(study: optuna.Study) -> dict[int, tuple[str, float | None]]:
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return {t.number: (t.state.name, t.value) for t in study.get_trials() if t.state in done}


def _no_config_twice(folder: Path, *, lost: tuple[int, dict[str, Any]] | None = None) -> None:
    """No config measured twice; ``lost``: (pid, config) of a burst whose result its
    process never stored (killed after the fake burst logged it, before the trial was
    told): its config ran again, rightly."""
    bursts = _bursts(folder)
    if lost is not None:
        pid, config = lost
        bursts = [b for b in bursts if (b["pid"], b["config"]) != (pid, config)]
    counts = collections.Counter(json.dumps(b["config"], sort_keys=True) for b in bursts)
    twice = [config for config, n in counts.items() if n > 1]
    assert twice == [], f"configs measured twice: {twice}"


def _wait(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[tuple[str, str]]:
    return [p.communicate(timeout=timeout) for p in procs]


def test_two_workers_finish_the_study_once(tmp_path: Path, storage: str) -> None:
    procs = [_worker(tmp_path, storage, FAKE_BURST_PEERS="2") for _ in range(2)]
    outputs = _wait(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs
    presets = [json.loads(out.strip().splitlines()[-1])["preset"] for out, _ in outputs]
    assert sorted(p is None for p in presets) == [False, True], presets  # written once
    assert (tmp_path / "best.yaml").is_file()
    bursts = _bursts(tmp_path)
    assert len(bursts) == 2 * N
    assert {b["pid"] for b in bursts} == {p.pid for p in procs}  # both worked
    _no_config_twice(tmp_path)
    study = _study(storage)
    assert len(_measured(study)) == 2 * N
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


def test_a_killed_worker_loses_no_trial_and_the_other_completes(
    tmp_path: Path, storage: str
) -> None:
    """The victim is on this machine: the survivor sees its process gone at once."""
    _kill_one_worker(tmp_path, storage, victim_host="")


def test_a_killed_remote_worker_is_found_by_its_heartbeats(tmp_path: Path, postgres: str) -> None:
    """The victim plays a worker on another machine (``AUTOTUNE_HOST``), whose process the
    survivor cannot see: Optuna's heartbeats (every second here, 4 s of grace) fail its
    running trial, and the failed-trial callback queues its config again."""
    storage = _database(postgres, tmp_path.name.lower()[:60])
    _kill_one_worker(tmp_path, storage, victim_host="elsewhere")


def _kill_one_worker(tmp_path: Path, storage: str, *, victim_host: str) -> None:
    # the victim's bursts are long, so that the kill lands inside one
    victim = _worker(tmp_path, storage, FAKE_BURST_S="3", AUTOTUNE_HOST=victim_host)
    survivor = _worker(tmp_path, storage, FAKE_BURST_S="0.6")
    deadline = time.monotonic() + 120
    while len({b["pid"] for b in _bursts(tmp_path)}) < 2 or len(_bursts(tmp_path)) < 3:
        assert time.monotonic() < deadline, "the workers did not start measuring"
        assert victim.poll() is None and survivor.poll() is None
        time.sleep(0.1)
    while (killed := _measuring(_study(storage), victim.pid)) is None:  # inside a burst
        assert time.monotonic() < deadline and victim.poll() is None
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    before = _finished(_study(storage))
    if killed in before:  # its burst ended and was stored before the kill landed
        pytest.skip("the kill missed the victim's burst (a timing the test cannot fix)")
    (out, err), = _wait([survivor])  # fmt: skip
    assert survivor.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["preset"] is not None
    assert (tmp_path / "best.yaml").is_file()
    study = _study(storage)
    after = _finished(study)
    lost = {n: v for n, v in before.items() if after.get(n) != v}
    assert lost == {}, f"finished trials lost or changed by the kill: {lost}"
    assert len(_measured(study)) == 2 * N
    killed_trial = study.get_trials()[killed]
    assert killed_trial.state == optuna.trial.TrialState.FAIL
    _no_config_twice(tmp_path, lost=(victim.pid, killed_trial.user_attrs["config"]))
    states = collections.Counter(t.state.name for t in study.get_trials())
    assert states["RUNNING"] == 0, states
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    shown = [
        (t.number, t.state.name, (t.user_attrs.get("owner") or {}).get("pid"), t.params)
        for t in study.get_trials()
    ]
    shown.append(("victim", victim.pid, victim.returncode, "survivor", survivor.pid))
    assert failed, f"the killed worker's running trial was not failed: {shown}"
    for trial in failed:  # its config queued (again, or still): run, replayed or waiting
        queued = [t.system_attrs.get("fixed_params") for t in study.get_trials() if t != trial]
        assert trial.params in queued, shown
    if victim_host:  # failed by the heartbeats, not by the owner check on this machine
        assert all(not t.user_attrs.get("outcome") for t in failed), shown


def test_finish_writes_the_preset_from_the_stored_trials(tmp_path: Path) -> None:
    storage = f"journal:{tmp_path / 'study.log'}"
    procs = [_worker(tmp_path, storage) for _ in range(2)]
    _wait(procs)
    (tmp_path / "best.yaml").unlink()
    bursts = len(_bursts(tmp_path))
    finisher = _worker(tmp_path, storage, "--finish")
    (out, err), = _wait([finisher])  # fmt: skip
    assert finisher.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["preset"] is not None
    assert (tmp_path / "best.yaml").is_file()
    assert len(_bursts(tmp_path)) == bursts  # no trial ran again


def test_devices_run_one_worker_per_device_and_never_share_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--devices``' launcher: one worker process per device, all on one study; two
    bursts never overlap on one device (the devices are labels here: the bursts are
    fakes)."""
    from autotune.study.storage.workers import WorkerSlot, run_workers

    for name, value in _env(FAKE_BURST_PEERS="2").items():
        monkeypatch.setenv(name, value)
    storage = f"journal:{tmp_path / 'study.log'}"
    command = [sys.executable, str(SCRIPT), str(tmp_path), storage, str(2 * N)]
    slots = [WorkerSlot("gpu:0"), WorkerSlot("gpu:1")]
    assert run_workers(command, slots, logs=tmp_path / "logs") == 0
    by_device: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for burst in _bursts(tmp_path):
        by_device[burst["device"]].append(burst)
    assert sorted(by_device) == ["gpu:0", "gpu:1"]
    assert sum(map(len, by_device.values())) == 2 * N
    for bursts in by_device.values():
        assert len({b["pid"] for b in bursts}) == 1  # one worker per device
        spans = sorted((b["start"], b["end"]) for b in bursts)
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))
    _no_config_twice(tmp_path)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
def test_cpu_workers_are_pinned_to_cores_of_their_own(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from autotune.study.storage.workers import plan_workers, run_workers
    from autotune.testing.burst import cpu_profile

    cores = len(os.sched_getaffinity(0))
    slots = plan_workers("", cpu_profile(cores=cores), cpu_workers=cores)
    show = "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"
    assert run_workers([sys.executable, "-c", show], slots, logs=tmp_path) == 0
    lines = sorted(capfd.readouterr().out.split("\n"))[1:]
    assert lines == sorted(f"[{core}] 1" for core in sorted(os.sched_getaffinity(0)))


def test_a_claim_on_postgresql_has_one_winner(tmp_path: Path, postgres: str) -> None:
    """Eight threads, each with its own connection, claim one study attribute at once on
    the server (the race, the preset and a lone search are claimed this way): one wins,
    and every thread reads that winner back."""
    from claim_race import claim_at_once

    holders = claim_at_once(_database(postgres, tmp_path.name.lower()[:60]))
    assert len(holders) == 8 and all(h == holders[0] for h in holders), holders
