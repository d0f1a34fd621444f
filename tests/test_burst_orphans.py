"""A trial's descendants end with its burst, also those that left its session: a daemon
a user's ``build`` detached (a double fork with ``setsid``) is adopted by the search (a
child subreaper while a burst runs) and ended as the burst ends
(``autotune.burst.process.orphans_ended``); the user's own processes and the sweeper are
left alone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fake_detach import DETACH

from autotune.burst import sweeper as sweeper_module
from autotune.burst.process import PARENT_ENV, orphans_ended
from autotune.burst.supervisor import run_burst
from autotune.burst.sweeper import FOLDER_PREFIX
from autotune.burst.zygote import SWITCH_ENV
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a child subreaper is Linux's"
)

# Run as ``python -c DETACH_SCRIPT COMMAND...``: starts COMMAND as a daemon (a double
# fork with setsid; the process between exits) and prints the daemon's pid.
DETACH_SCRIPT = """
import os, sys
read, write = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_RDWR), 1)  # the caller reads to the end
        os.execvp(sys.argv[1], sys.argv[1:])
    os.write(write, str(pid).encode())
    os._exit(0)
os.close(write)
print(os.read(read, 64).decode(), flush=True)
os.waitpid(middle, 0)
"""


def _detach(command: list[str], env: dict[str, str]) -> psutil.Process:
    """``command`` as a daemon whose parent is gone, started from this process."""
    out = subprocess.run(
        [sys.executable, "-c", DETACH_SCRIPT, *command],
        env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True, timeout=30,
    ).stdout  # fmt: skip
    return psutil.Process(int(out.split()[0]))


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _end(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for proc in procs:  # one adopted by this process is reaped here, another by init
        with contextlib.suppress(psutil.Error, ChildProcessError):
            proc.wait(timeout=5)


@pytest.fixture
def user_group() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the user's own, in a session of its own, that must outlive bursts."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_detached_descendant_of_a_trial_is_ended_and_the_users_are_not(
    tmp_path: Path, user_group: subprocess.Popen[bytes]
) -> None:
    """Three orphans arrive while a burst runs: one of a trial (its environment names
    this process), one of the user's (no such mark), and the sweeper (marked, but ending
    by itself once its group has). Only the first is ended, and reaped."""
    marked = {**os.environ, PARENT_ENV: str(os.getpid())}
    unmarked = {k: v for k, v in os.environ.items() if k != PARENT_ENV}
    folder = tmp_path / f"{FOLDER_PREFIX}0-0-test"
    sweeper_command = [sys.executable, "-I", "-S", str(Path(sweeper_module.__file__).resolve())]
    with orphans_ended():
        trials = _detach(["sleep", "60"], marked)
        users = _detach(["sleep", "60"], unmarked)
        sweeper = _detach([*sweeper_command, str(user_group.pid), str(folder)], marked)
        assert trials.ppid() == os.getpid(), "the orphan was not adopted by this process"
    try:
        assert not psutil.pid_exists(trials.pid), "the trial's daemon outlived its burst"
        assert _running(users), "a process of the user's own was ended"
        assert _running(sweeper), "the sweeper was ended"
        assert user_group.poll() is None
    finally:
        _end([users, sweeper])


def test_a_process_stops_being_a_subreaper_once_its_bursts_end() -> None:
    with orphans_ended():
        pass
    orphan = _detach(["sleep", "60"], dict(os.environ))
    try:
        assert orphan.ppid() != os.getpid()
    finally:
        _end([orphan])


@pytest.mark.parametrize("warm_start", [None, "0"], ids=["zygote", "fresh"])
def test_a_build_that_detaches_daemons_leaves_none_after_its_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm_start: str | None
) -> None:
    """A user's build that double-forks with setsid (one daemon in Python, one running
    ``sleep``): the burst still ends ok, and neither daemon outlives it, whether the
    trial was forked by a zygote or started fresh. Warm start unset is on: the zygote the
    other tests of this process started for their environment serves here too."""
    if warm_start is None:
        monkeypatch.delenv(SWITCH_ENV, raising=False)
    else:
        monkeypatch.setenv(SWITCH_ENV, warm_start)
    record = tmp_path / "record.json"
    spec = load_model(f"{DETACH}:detach_spec").with_args(record_file=str(record))
    result = run_burst(spec, TrainConfig(micro_batch=2, seq_len=4), steps=1, warmup=0)
    assert result.status == "ok", result.reason
    daemons = json.loads(record.read_text())["daemons"]
    assert len(daemons) == 2
    left = [pid for pid in daemons if psutil.pid_exists(pid)]
    with contextlib.suppress(ProcessLookupError):
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"daemons left after the burst: {left}"
