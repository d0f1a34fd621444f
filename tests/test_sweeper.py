"""The sweeper: a trial's folder removed once the trial's whole group has ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.burst.sweeper import group_alive, main, start_sweeper

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")


def _group_writing(folder: Path) -> subprocess.Popen[bytes]:
    """A process group whose leader writes one file in ``folder`` and then waits."""
    script = (
        f"from pathlib import Path\nimport time\nf = Path({str(folder)!r})\n"
        "f.mkdir(exist_ok=True)\n(f / 'marker').touch()\ntime.sleep(60)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (folder / "marker").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return leader


def _gone(folder: Path, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not folder.exists()


def test_the_folder_goes_once_the_group_has_ended_not_before(tmp_path: Path) -> None:
    folder = tmp_path / "autotune-burst-1-x-y"
    leader = _group_writing(folder)
    try:
        start_sweeper(leader.pid, folder)
        time.sleep(0.5)
        assert (folder / "marker").exists()  # the group still runs: the sweeper waits
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    assert _gone(folder)


def test_a_zombie_does_not_keep_its_group_alive(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert group_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while group_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not group_alive(child.pid)
        assert child.poll() is not None  # reaped only now: it was a zombie until here
    finally:
        child.kill()
        child.wait()


def test_a_folder_not_named_as_a_trials_is_never_removed(tmp_path: Path) -> None:
    folder = tmp_path / "my-results"
    folder.mkdir()
    assert main([str(os.getpid() + 10**6), str(folder)]) == 2
    assert folder.is_dir()


def test_the_sweeper_runs_by_path_with_the_standard_library_alone(tmp_path: Path) -> None:
    """``-I -S``: no site-packages, no PYTHONPATH. A group that is gone is swept at once."""
    folder = tmp_path / "autotune-burst-2-x-y"
    (folder / "pymp-1").mkdir(parents=True)
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    start_sweeper(gone.pid, folder)
    assert _gone(folder)


def test_the_folders_beginning_with_the_name_go_and_no_other(tmp_path: Path) -> None:
    """The search sweeps a trial's folders by the start of their name (its pid and start
    time: it does not know the rest), never another trial's."""
    ours = [tmp_path / "autotune-burst-5-6b0d-x1", tmp_path / "autotune-burst-5-6b0d-x2"]
    others = [tmp_path / "autotune-burst-5-6b0e-x1", tmp_path / "autotune-burst-50-6b0d-x1"]
    for folder in ours + others:
        (folder / "pymp-1").mkdir(parents=True)
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    assert main([str(gone.pid), str(tmp_path / "autotune-burst-5-6b0d-")]) == 0
    assert [f.exists() for f in ours + others] == [False, False, True, True]


def test_a_bare_prefix_is_refused(tmp_path: Path) -> None:
    """A name that is the prefix alone would match every trial's folder."""
    folder = tmp_path / "autotune-burst-1-x-y"
    folder.mkdir()
    assert main([str(os.getpid() + 10**6), str(tmp_path / "autotune-burst-")]) == 2
    assert folder.is_dir()
