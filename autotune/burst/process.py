"""The trial's process, from the parent's side: its folder, its environment, starting it
in a session (and process group) of its own, and ending its whole tree.

``start_new_session`` puts the trial in its own session between fork and exec, with no
window in which it shares the parent's group; ``os.killpg`` then ends the trial and its
DataLoader workers together, and Ctrl-C in the terminal reaches only the parent. POSIX
only (sessions, ``killpg``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import psutil

from autotune.burst.sweeper import FOLDER_PREFIX

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.engine.memory import ProcessTreeSampler

__all__ = [
    "REQUEST_FILE",
    "TrialProcess",
    "child_env",
    "exited",
    "kill_group",
    "make_workdir",
    "reap_tree",
    "remove_orphaned_workdirs",
    "spawn_child",
    "tree_budget",
    "trust_tmpdir",
    "use_as_tmpdir",
    "wait_exit",
]

WORKDIR_PREFIX = FOLDER_PREFIX  # "autotune-burst-", then the pid of the process that made it
REQUEST_FILE = "request.pkl"  # in the trial's folder: what the parent sends it


class TrialProcess(Protocol):
    """The trial's main process as the supervisor uses it: ``subprocess.Popen``, or a
    trial forked by a zygote (``autotune.burst.zygote.ForkedTrial``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def exited(proc: psutil.Process | None) -> bool:
    """Whether the trial's main process has ended (without reaping it: the pid, and with it
    the process group id, stays reserved until we wait on it)."""
    if proc is None:
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return True


def wait_exit(proc: psutil.Process | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def remove_orphaned_workdirs() -> None:
    """Remove the trial folders whose maker is gone: no process with its pid, or another
    one (the pid reused: the folder's name carries its maker's start time). A one-process
    trial makes its own folder and removes it as it ends, and when its search was killed
    (``autotune.burst.child``); ``run_burst`` makes the folder of a torchrun trial. This
    sweep, at each burst's start and end, takes what neither could: a trial killed outright
    (the budget's watchdog, a timeout), or a search killed while its torchrun trial had not
    yet started."""
    for path in (p for root in _workdir_roots() for p in root.glob(f"{WORKDIR_PREFIX}*-*")):
        if path.is_dir() and not _maker_alive(path.name.removeprefix(WORKDIR_PREFIX)):
            shutil.rmtree(path, ignore_errors=True)


def _maker_alive(name: str) -> bool:
    """Whether the process that made the folder ``PID-START-XXXX`` (``make_workdir``:
    START its start time, hex seconds; ``PID-XXXX`` from an older autotune) still runs."""
    pid, _, rest = name.partition("-")
    if not pid.isdigit():
        return True  # not one of ours: leave it
    start = rest.split("-", 1)[0] if "-" in rest else ""
    try:
        created = psutil.Process(int(pid)).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # another user's process: it may be theirs
    try:
        return abs(created - int(start, 16)) < 2.0
    except ValueError:  # no start time in the name: the pid is all there is to go by
        return True


def make_workdir() -> Path:
    """A fresh temporary folder for one trial, named after this process (the trial, or
    the search under torchrun) and its start time (see ``remove_orphaned_workdirs``), in
    the temporary folder, or in /tmp where that one's path is too long for the sockets
    of DataLoader workers (a worker whose socket cannot be bound never delivers a batch,
    and the trial would wait for it until its timeout)."""
    started = int(psutil.Process().create_time())  # in hex: the name stays short (sockets)
    prefix = f"{WORKDIR_PREFIX}{os.getpid()}-{started:x}-"
    root = _workdir_roots()[-1]
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


# The longest temporary folder whose files can still be AF_UNIX sockets (108 bytes with
# the name multiprocessing gives them: pymp-XXXXXXXX/listener-XXXXXXXX).
_MAX_SOCKET_DIR = 70
_SHORT_ROOT = Path("/tmp")
_WORKDIR_NAME = len(f"/{WORKDIR_PREFIX}4194304-{2**32:x}-xxxxxxxx")  # the longest name


def _workdir_roots() -> list[Path]:
    """Where trial folders are made: the temporary folder, then /tmp in its place when
    a folder in it could not hold sockets (the last entry is where new ones go)."""
    root = Path(tempfile.gettempdir())
    if len(str(root)) + _WORKDIR_NAME <= _MAX_SOCKET_DIR or not _SHORT_ROOT.is_dir():
        return [root]
    return [root, _SHORT_ROOT]


def child_env(workdir: Path | None, config: TrainConfig) -> dict[str, str]:
    """The trial's environment: this process's, with the OpenMP wait policy ``config`` runs
    with (``autotune/machine/omp.py``: OpenMP reads it when torch loads, before the child
    can set anything). Its temporary files go in its own folder (``workdir`` where this
    process made it, under torchrun; a one-process trial moves them there itself, see
    ``use_as_tmpdir``), removed with it: a DataLoader worker's ``pymp-*`` folder (its worker
    ends by a signal, skipping the clean-up at exit) would otherwise be left in the user's
    temporary folder by every burst. torch.compile's cache stays where it was, shared by
    the bursts."""
    from autotune.machine.compile_cache import CACHE_ENV, torch_default_dir
    from autotune.machine.omp import environment_for

    env = environment_for(config, os.environ)
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault leaves a traceback in the trial's log
    env["AUTOTUNE_BURST_PARENT"] = str(os.getpid())  # the trial follows this process
    env.setdefault(CACHE_ENV, torch_default_dir())  # not under the trial's TMPDIR
    env["TMPDIR"] = tempfile.gettempdir()  # checked here once: see ``trust_tmpdir``
    if workdir is not None and _fits_sockets(workdir):
        env["TMPDIR"] = str(workdir)
    # From a source checkout (not installed), make this autotune importable in the child.
    # Never for an installed one: site-packages on PYTHONPATH would go before the stdlib.
    root = Path(__file__).resolve().parents[2]  # autotune/burst/process.py -> the checkout
    if (root / "pyproject.toml").is_file():
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(root) + (os.pathsep + path if path else "")
    return env


def _fits_sockets(folder: Path) -> bool:
    """Whether ``folder`` is short enough to hold multiprocessing's sockets."""
    return len(str(folder)) <= _MAX_SOCKET_DIR


def trust_tmpdir() -> None:
    """Take the TMPDIR the search gave this trial (``child_env``: its own temporary
    folder, already checked) as it is. Python's first ``tempfile.gettempdir()`` in a
    process checks the folder by writing a file of 8 random letters there and removing
    it; a trial killed by its search between the two (a stop during its start-up) left
    that file in the user's temporary folder (the kill suite on CI: one in 50 kills)."""
    tempfile.tempdir = os.environ.get("TMPDIR") or None


def use_as_tmpdir(folder: Path) -> None:
    """Send this process's temporary files, and its children's, to ``folder`` (where it
    is short enough for sockets): called by a trial before it starts any worker."""
    if _fits_sockets(folder):
        os.environ["TMPDIR"] = str(folder)
        tempfile.tempdir = str(folder)


def tree_budget(budget_bytes: int | None, nproc: int) -> int | None:
    """What the CPU watchdog allows the whole tree: the budget is each rank's, and the
    torchrun launcher counts like one more process."""
    if budget_bytes is None or nproc == 1:
        return budget_bytes
    return budget_bytes * (nproc + 1)


def spawn_child(
    config: TrainConfig,
    *,
    request: IO[bytes] | Path,
    write_fd: int,
    log: IO[bytes],
    channel: str | None = None,
    nproc: int = 1,
) -> subprocess.Popen[bytes]:
    """The trial process, in a session (and process group) of its own, its output in
    ``log``, its messages to ``write_fd`` (or, under torchrun with ``nproc`` > 1
    processes, to the FIFO named ``channel``). One process inherits its ``request`` (a
    file with no name) and makes its own folder, so that no folder exists without a
    trial to remove it; torchrun's ranks read it by its path in the folder made for them.
    (A one-process CPU trial is forked by a zygote instead where one can serve:
    ``autotune.burst.zygote``.)"""
    from autotune.train.distributed import torchrun_command

    fds: tuple[int, ...] = ()
    workdir: Path | None = None
    if isinstance(request, Path):  # torchrun's ranks: by its path, in their folder
        args = ["autotune.burst.child", str(request), channel or str(write_fd)]
        workdir = request.parent
    else:
        args = ["autotune.burst.child", f"fd:{request.fileno()}", str(write_fd)]
        fds = (write_fd, request.fileno())
    command = [sys.executable, "-m", *args] if nproc == 1 else torchrun_command(nproc, args)
    return subprocess.Popen(  # an OSError here (no interpreter?) is the caller's
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        pass_fds=fds,
        start_new_session=True,
        env=child_env(workdir, config),
    )


def reap_tree(sampler: ProcessTreeSampler) -> None:
    """Make sure no process of the trial's tree is left (one that left the group too)."""
    procs = [p for p in sampler.processes()[1:] if _alive(p)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    if procs:
        psutil.wait_procs(procs, timeout=5)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
