"""The trial's process, from the parent's side: its folder, its environment, starting it
in a session (and process group) of its own, and ending its whole tree.

``start_new_session`` puts the trial in its own session between fork and exec, with no
window in which it shares the parent's group; ``os.killpg`` then ends the trial and its
DataLoader workers together, and Ctrl-C in the terminal reaches only the parent. POSIX
only (sessions, ``killpg``).

A descendant that leaves the trial's session (a user's ``build`` that starts a helper
daemon: a double fork with ``setsid``) escapes the group, and, once the process between
dies, its parent too: it was left to init, alive after ``autotune.tune()`` returned.
While a burst runs, this process is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``):
such orphans are reparented to it, a zygote's trials' included (a zygote is no
subreaper, so theirs pass through it). When the last running burst ends,
``orphans_ended`` ends those that came from a trial: a child of this process in another
session than its own, started since the burst began, whose environment names this
process as its trial's search (``AUTOTUNE_BURST_PARENT``, which every trial and what it
starts inherit); one already ended (a zombie, whose environment is gone) needs only the
session and the time, and is reaped. Never a live zygote, the sweeper
(``autotune.burst.sweeper``: it ends by itself once its group has), a child of this
session (the user's own subprocesses) nor one without the mark (an orphan of the user's
that arrives during a burst stays this process's child). What this cannot reach:
a daemon started with an environment of its own (``env -i``) is left alone, and a search
killed outright leaves the detached descendants of its running trial to init.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import psutil

from autotune.burst import sweeper
from autotune.burst.sweeper import FOLDER_PREFIX
from autotune.core.makers import maker_alive, maker_tag
from autotune.core.signals import prctl

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
    "orphans_ended",
    "reap_tree",
    "remove_orphaned_workdirs",
    "spawn_child",
    "sweep_after_kill",
    "tree_budget",
    "trust_tmpdir",
    "use_as_tmpdir",
    "wait_exit",
]

WORKDIR_PREFIX = FOLDER_PREFIX  # "autotune-burst-", then the pid of the process that made it
REQUEST_FILE = "request.pkl"  # in the trial's folder: what the parent sends it
PARENT_ENV = "AUTOTUNE_BURST_PARENT"  # the search's pid, in every trial's environment


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
        if path.is_dir() and not maker_alive(path.name.removeprefix(WORKDIR_PREFIX)):
            shutil.rmtree(path, ignore_errors=True)


def make_workdir() -> Path:
    """A fresh temporary folder for one trial, named after this process (the trial, or
    the search under torchrun) and its start time (see ``remove_orphaned_workdirs``), in
    the temporary folder, or in /tmp where that one's path is too long for the sockets
    of DataLoader workers (a worker whose socket cannot be bound never delivers a batch,
    and the trial would wait for it until its timeout)."""
    return Path(tempfile.mkdtemp(prefix=_workdir_name(psutil.Process()), dir=_workdir_roots()[-1]))


def _workdir_name(maker: psutil.Process) -> str:
    """How the names of the folders ``maker`` makes begin: its pid and its start time."""
    return f"{WORKDIR_PREFIX}{maker_tag(maker)}-"


def sweep_after_kill(pgid: int, trial: psutil.Process) -> subprocess.Popen[bytes] | None:
    """Before a one-process ``trial`` (the leader of group ``pgid``) is killed outright:
    have the folder it made removed once the group has ended (the sweeper's process, or
    None where none could start). The trial cannot remove it itself, and this process's
    own sweep after the burst (``remove_orphaned_workdirs``) is gone with this process if
    it is killed in between (``autotune.burst.sweeper``)."""
    try:
        folder = _workdir_roots()[-1] / _workdir_name(trial)
    except psutil.Error:  # gone already
        return None
    try:
        return sweeper.start_sweeper(pgid, folder)
    except OSError:  # no process to spare: the sweep after the burst stays
        return None


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
    env[PARENT_ENV] = str(os.getpid())  # the trial follows this process (and see orphans_ended)
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
    (A one-process trial is forked by a zygote instead where one can serve:
    ``autotune.burst.zygote``.)"""
    from autotune.engine.distributed import torchrun_command

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


# -- what leaves the trial's session (see the module's docstring) ---------------------------

PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_ADOPTED_ROUNDS = 5  # an ended orphan's own children come to this process in turn
_SWEEPER = str(Path(sweeper.__file__).resolve())


def _is_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    return bool(done and flag.value)


class _Adoption:
    """The bursts running in this process, and since when this process adopts orphans."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bursts = 0
        self.since = 0.0  # time.time() when the first of the running bursts began
        self.ours = False  # this process made itself a subreaper (and so unmakes itself)


_adoption = _Adoption()


@contextlib.contextmanager
def orphans_ended(keep: Callable[[], Collection[int]] = frozenset) -> Iterator[None]:
    """Around a burst: this process adopts the orphaned descendants of its trials, and,
    as the last running burst ends, ends those that came from a trial (never the pids
    ``keep()`` returns: the live zygotes). The flag is this process's only while bursts
    run, and stays where the process was a subreaper already."""
    with _adoption.lock:
        if _adoption.bursts == 0:
            _adoption.since = time.time()
            _adoption.ours = not _is_subreaper() and prctl(PR_SET_CHILD_SUBREAPER, 1)
        _adoption.bursts += 1
    try:
        yield
    finally:
        with _adoption.lock:
            _adoption.bursts -= 1
            if _adoption.bursts == 0:
                end_adopted(since=_adoption.since, keep=set(keep()))
                if _adoption.ours:
                    prctl(PR_SET_CHILD_SUBREAPER, 0)
                    _adoption.ours = False


def end_adopted(*, since: float, keep: Collection[int] = ()) -> list[int]:
    """End (and reap) the children of this process that came from a trial started since
    ``since`` (``time.time()``), with what they started; the pids ended."""
    me, session = os.getpid(), os.getsid(0)
    ended: list[int] = []
    for _ in range(_ADOPTED_ROUNDS):
        try:
            children = psutil.Process().children()
        except psutil.Error:
            break
        found = [p for p in children if p.pid not in keep and _from_a_trial(p, me, session, since)]
        if not found:
            break
        for proc in found:
            with contextlib.suppress(psutil.Error):  # what it started, before it can start more
                for descendant in [proc, *proc.children(recursive=True)]:
                    descendant.kill()
        psutil.wait_procs(found, timeout=5)  # our children: this reaps them
        ended += [p.pid for p in found]
    return ended


def _from_a_trial(proc: psutil.Process, me: int, session: int, since: float) -> bool:
    """Whether ``proc`` (a child of this process) came from a trial: see the module's
    docstring."""
    try:
        if os.getsid(proc.pid) == session or proc.create_time() < since - 1.0:
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        if _SWEEPER in proc.cmdline():
            return False
        return proc.environ().get(PARENT_ENV) == str(me)
    except (psutil.Error, OSError):  # gone, or another user's: not ours to end
        return False
