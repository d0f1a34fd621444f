"""Warm start: a process that has imported torch once, and forks each trial from it.

A compiled burst that compiles from the cache spends about as long importing torch,
Dynamo and Inductor (2.3-2.6 s on a 2-core Xeon) as it spends stepping; a search runs
twenty such bursts. A zygote is started once, with the environment its trials would have
been started with, imports them, and then forks a trial for each request: the fork is a
process of its own in a session of its own, exactly as a fresh trial, but starts with
those modules loaded (``benchmarks/warm_start.py``).

Which trials: one-process trials (``warm_start_allowed``); torchrun's ranks start fresh.
OpenMP, Inductor and torch read parts of their environment when they load, so a zygote
serves only trials whose environment is the one it was started with (a config with
``omp_spin`` has its own); ``AUTOTUNE_WARM_START=0`` turns the whole thing off, and any
failure of a zygote falls back to a fresh process (``spawn_child``).

A CUDA trial's zygote (``cuda``) must leave CUDA untouched: a driver initialised before
a fork cannot serve the forked process, and every config of the search would fail. So
before it says it is ready it checks (``_cuda_unfit``) that its imports neither
initialised torch's CUDA nor loaded the driver (``libcuda``), and that a process forked
from it starts CUDA and runs a kernel (one Inductor made, for compiled trials); else the
trials of its environment start fresh processes, and the reason is kept
(``Zygotes.failures``). After the check it runs nothing but forks and reaps, so what the
check saw holds for every fork. Each forked trial makes its own CUDA context, allocator
and budget, as a fresh one does: the fork saves the imports (torch with CUDA, Dynamo,
Inductor), not CUDA's start.

From the parent's side, ``Zygotes.spawn`` returns a ``ForkedTrial``: the ``pid``,
``poll``, ``wait`` and ``returncode`` of ``subprocess.Popen``, the trial's exit status
read through its zygote (its parent). A zygote reaps a trial only when asked: the pid,
and with it the process group id, stays reserved until the supervisor has ended the
trial's tree (``autotune.burst.supervisor._end``). The zygote ends when its parent closes
the socket or dies (end of file); the trials follow the search itself
(``AUTOTUNE_BURST_PARENT``), as before.

A zygote is watched. It forks or reaps in milliseconds, so while the parent waits for an
answer it looks at the zygote every 0.1 s: one that is stopped (SIGSTOP by hand, or a
trial's ``build`` that stops its parent, which is the zygote) is noticed at once, one
that is silent for ``REPLY_TIMEOUT_S`` (10 s) then; either is said live (a
``RuntimeWarning``) and SIGKILLed (a stopped process never reads the end of file). Its
trials come to the search, a child subreaper while a burst runs
(``autotune.burst.process.orphans_ended``), which reaps them itself, with their real
exit status. A spawn it did not answer may have forked the trial already: that fork is
ended with it, and the trial is started again. A stopped zygote is replaced by a new one
at the next trial (fresh processes would hand a ``build`` that stops its parent the
search itself); the trials of a silent one's environment start fresh processes (a hang
would come back). A zygote asks the kernel for SIGCONT when its parent dies
(``PR_SET_PDEATHSIG``), so that a stopped zygote of a search killed outright still reads
the end of file and ends; ``close`` (at the search's exit too) kills a stopped one.

The zygote's side is ``main`` (``python -m autotune.burst.zygote FD``): one request at a
time on a Unix datagram socket, with the trial's request, result pipe and log passed as
descriptors.

Why not ``multiprocessing``'s fork server (``set_forkserver_preload``): a process has one,
started with the environment the process had then and one list of modules, where a trial
needs the environment it would have been started with (OpenMP, Inductor and torch read
it as they load) and a compiled one more modules. Its children stay in the server's
session and process group (a ``setsid`` in the target would come after the parent holds
the pid; ``_spawn`` answers once it is done), and the server reaps each one as soon as
it exits, so its pid, and with it the process group id, could be taken again before the
supervisor has ended the trial's tree. The server or the child imports the caller's
``__main__`` script again (a script that calls ``autotune.tune()`` without a
``__main__`` guard would run again), where a trial here is ``autotune.burst.child`` on
its descriptors. And a server that is stopped or hangs blocks the request with no time
limit, and no fallback to a fresh process.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import psutil

from autotune.core.signals import STOP_SIGNALS

__all__ = [
    "ForkedTrial",
    "Zygote",
    "ZygoteError",
    "Zygotes",
    "environment_key",
    "main",
    "warm_start_allowed",
    "zygotes",
]

SWITCH_ENV = "AUTOTUNE_WARM_START"  # "0": every trial starts a fresh interpreter
# What every trial imports before its first step (an eager step loads Dynamo too), and what
# a compiled one adds: 1.4 s and 115 MB of resident memory that an eager trial's peak must
# not count. The model's own module is the trial's to import (a user's file may change).
WARM_MODULES = (
    "torch",
    "torch._dynamo",
    "autotune.burst.child",
    "autotune.burst.trial",
    "autotune.engine.step",
)
COMPILE_MODULES = ("torch._inductor.compile_fx",)
MAX_ZYGOTES = 4  # kept warm at once: with and without omp_spin, compiled or eager
START_TIMEOUT_S = 300.0  # the imports, on a loaded machine
# A fork or a reap takes milliseconds: a zygote silent this long hangs (checked every
# _CHECK_S; a stopped one is noticed at the first check).
REPLY_TIMEOUT_S = 10.0
CUDA_CHECK_TIMEOUT_S = 120.0  # a fork's first CUDA context and kernel, on a loaded host
_CHECK_S = 0.1
_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
# The exit status of a trial whose zygote died before it (init reaped it): unknown, and
# said so by a status no trial exits with by itself.
LOST_STATUS = 255
_MAX_MESSAGE = 1 << 20
_POLL_S = 0.005


class ZygoteError(RuntimeError):
    """The zygote could not start or answer: the caller starts a fresh process instead.
    ``stall``: "stopped" or "silent" where it stalled (see the module's docstring)."""

    def __init__(self, message: str, *, stall: str | None = None) -> None:
        super().__init__(message)
        self.stall = stall


def warm_start_allowed(*, nproc: int) -> bool:
    """Whether a trial may be forked from a zygote (see the module's docstring)."""
    return (
        nproc == 1 and sys.platform.startswith("linux") and os.environ.get(SWITCH_ENV, "1") != "0"
    )


# -- the parent's side ----------------------------------------------------------------------


@dataclass
class ForkedTrial:
    """A trial forked by ``zygote``: what the supervisor uses of ``subprocess.Popen``."""

    pid: int
    zygote: Zygote
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.poll(self.pid)
            except ZygoteError:  # the zygote is gone: its trial came to us, or to init
                self.returncode = _reap_orphaned_trial(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"trial {self.pid}", timeout or 0.0)
            time.sleep(_POLL_S)
        return code


@dataclass
class Zygote:
    """One zygote process, started with ``env`` (with Inductor loaded where
    ``compiled``; checked for forks that use CUDA where ``cuda``), and the socket to it."""

    env: dict[str, str]
    compiled: bool = False
    cuda: bool = False
    proc: subprocess.Popen[bytes] = field(init=False)
    sock: socket.socket = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    stall: str | None = field(default=None, init=False)  # "stopped" or "silent", once seen
    trials: set[int] = field(default_factory=set, init=False)  # forked, not yet reaped

    def __post_init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autotune.burst.zygote",
                    str(theirs.fileno()),
                    *(["--compiled"] if self.compiled else []),
                    *(["--cuda"] if self.cuda else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # Ctrl-C in the terminal reaches only the search
                env=self.env,
            )
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"could not start: {exc}") from exc
        finally:
            theirs.close()
        self.sock = ours
        try:
            reply = self._receive(START_TIMEOUT_S)
            if not reply.get("ready"):
                raise ZygoteError(reply.get("reason") or "not ready")
        except ZygoteError:
            self.close()  # no zygote left behind, whatever way its start failed
            raise

    def spawn(self, *, request_fd: int, write_fd: int, log_fd: int) -> int:
        """Fork a trial (``python -m autotune.burst.child fd:REQUEST WRITE``, in-process)
        with the zygote's ``env``, ignoring the stop signals this process ignores now (as
        a fresh interpreter started now would: ``_ignored_now``); its pid, once it leads a
        session of its own."""
        message = {"op": "spawn", "ignored": _ignored_now()}
        reply = self._ask(message, fds=[request_fd, write_fd, log_fd])
        pid = int(reply["pid"])
        self.trials.add(pid)
        return pid

    def poll(self, pid: int) -> int | None:
        """The trial's exit status (``Popen.returncode``'s convention), reaping it; None
        while it runs."""
        code = self._ask({"op": "poll", "pid": pid})["returncode"]
        if code is None:
            return None
        self.trials.discard(pid)
        return int(code)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the zygote: it exits at the end of file; killed if it does not, and at
        once if it stalled (a stopped process reads nothing)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.stall is not None or self._stopped():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _ask(self, message: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        with self.lock:
            try:
                socket.send_fds(self.sock, [json.dumps(message).encode()], fds or [])
                reply = self._receive(REPLY_TIMEOUT_S)
            except (OSError, ZygoteError) as exc:
                # A reply that comes late would answer the next question: this zygote
                # answers none any more (its trials follow the search, as before).
                forks = self._unanswered_forks() if message["op"] == "spawn" else []
                self.close()
                _reap(forks)
                raise ZygoteError(f"gone: {exc}", stall=self.stall) from exc
        if "error" in reply:
            raise ZygoteError(str(reply["error"]))
        return reply

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(_CHECK_S)
        while True:
            try:
                data = self.sock.recv(_MAX_MESSAGE)
                break
            except TimeoutError:
                self._check(deadline, timeout_s)
            except OSError as exc:
                raise ZygoteError(f"no answer: {exc}") from exc
        if not data:
            raise ZygoteError(f"ended (exit status {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(data)
        return reply

    def _check(self, deadline: float, timeout_s: float) -> None:
        """Raise if the zygote stalled: stopped, or silent past the deadline; say so."""
        if self._stopped():
            self.stall = "stopped"
            what = "was stopped (SIGSTOP, or a trial's build that stops its parent)"
            then = "the next trial starts a new one"
        elif time.monotonic() >= deadline:
            self.stall = "silent"
            what = f"did not answer in {timeout_s:g} s"
            then = "the trials of its environment start fresh processes"
        else:
            return
        warnings.warn(
            f"autotune: warm-start process {self.proc.pid} {what}: ended it; {then}",
            RuntimeWarning,
            stacklevel=2,
        )
        raise ZygoteError(what, stall=self.stall)

    def _stopped(self) -> bool:
        if self.proc.returncode is not None:
            return False
        try:
            return psutil.Process(self.proc.pid).status() in _STOPPED
        except psutil.Error:
            return False

    def _unanswered_forks(self) -> list[int]:
        """A spawn not answered may have forked the trial already (a zygote stopped
        between its fork and its answer): end every child of the zygote that is not a
        trial it answered for, before the trial is started again. Their pids."""
        if self.proc.poll() is not None:
            return []
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGSTOP)  # it forks no more
        try:
            forks = [p.pid for p in psutil.Process(self.proc.pid).children()]
        except psutil.Error:
            return []
        forks = [pid for pid in forks if pid not in self.trials]
        for pid in forks:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # its group: none yet, or that of its setsid
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        return forks


def environment_key(env: dict[str, str], *, compiled: bool, cuda: bool) -> tuple[object, ...]:
    """What tells one zygote from another: trials of one key may share it."""
    return (compiled, cuda, *sorted(env.items()))


class Zygotes:
    """The zygotes of this process, one per trial environment (at most ``MAX_ZYGOTES``,
    the least recently used closed first). An environment whose zygote failed is not
    tried again: its trials start fresh processes. Where a CUDA trial's zygote could not
    start, no other is tried either: what refuses one (CUDA started by the imports, a fork
    that cannot use the GPU) refuses them all, and each try costs a search on a GPU the
    imports and a CUDA context."""

    def __init__(self) -> None:
        self._live: dict[tuple[object, ...], Zygote] = {}
        self._failed: dict[tuple[object, ...], str] = {}
        self._cuda_refused: str | None = None
        self._lock = threading.Lock()

    def spawn(
        self,
        env: dict[str, str],
        *,
        compiled: bool,
        cuda: bool = False,
        request_fd: int,
        write_fd: int,
        log_fd: int,
    ) -> ForkedTrial | None:
        """A trial forked with ``env``, or None (the caller starts a fresh process)."""
        key = environment_key(env, compiled=compiled, cuda=cuda)
        fds = {"request_fd": request_fd, "write_fd": write_fd, "log_fd": log_fd}
        with self._lock:
            if key in self._failed or (cuda and self._cuda_refused is not None):
                return None
            zygote = self._live.pop(key, None)
            if zygote is not None:  # one that served before: if it died since, a new one
                try:
                    pid = zygote.spawn(**fds)
                except ZygoteError as exc:
                    zygote.close()
                    if exc.stall == "silent" or zygote.stall == "silent":
                        self._failed[key] = str(exc)  # a hang would come back: fresh processes
                        return None
                    zygote = None  # ended, or stopped: a new one
            if zygote is None:
                try:
                    zygote = Zygote(env, compiled, cuda)
                    pid = zygote.spawn(**fds)
                except ZygoteError as exc:  # a new one failed: this environment starts fresh
                    if exc.stall != "stopped":  # (one stopped by hand: this trial only)
                        self._failed[key] = str(exc)
                        if cuda:
                            self._cuda_refused = str(exc)
                    if zygote is not None:
                        zygote.close()
                    return None
            self._live[key] = zygote  # now the most recently used
            while len(self._live) > MAX_ZYGOTES:
                self._live.pop(next(iter(self._live))).close()
        return ForkedTrial(pid, zygote)

    def failures(self) -> dict[str, str]:
        """Why a zygote could not serve, by its environment's hash (for tests and logs)."""
        return {str(hash(key)): reason for key, reason in self._failed.items()}

    def pids(self) -> set[int]:
        """The live zygotes' pids: processes of this one that outlive every trial."""
        with self._lock:
            return {z.proc.pid for z in self._live.values() if z.alive()}

    def close(self) -> None:
        with self._lock:
            while self._live:
                self._live.popitem()[1].close()


zygotes = Zygotes()
atexit.register(zygotes.close)


def _ignored_now() -> list[int]:
    """The stop signals this process ignores now. A fresh trial inherits them through fork
    and exec; a forked one gets them from its zygote, which started with those of an
    earlier moment (a test that stops ignoring SIGINT after a zygote started, or a caller
    of the API that changes it between searches), so each spawn says them again."""
    return [int(sig) for sig in STOP_SIGNALS if signal.getsignal(sig) is signal.SIG_IGN]


# -- the zygote's side ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)  # its trials' environment, as it was before the imports
    sock = socket.socket(fileno=int(args[0]))
    from autotune.burst.process import trust_tmpdir
    from autotune.core.signals import PR_SET_PDEATHSIG, prctl

    # Stopped when its parent dies, it would never read the end of file: SIGCONT then
    # (SIGKILL would also come when only the thread that started it ends).
    prctl(PR_SET_PDEATHSIG, int(signal.SIGCONT))
    trust_tmpdir()  # Dynamo's import asks for the temporary folder: no probe file there
    compiled = "--compiled" in args[1:]
    try:
        for name in WARM_MODULES + (COMPILE_MODULES if compiled else ()):
            importlib.import_module(name)
    except BaseException as exc:  # the parent hears why, then starts fresh processes
        _send(sock, {"ready": False, "reason": f"importing: {type(exc).__name__}: {exc}"})
        return 1
    if threading.active_count() > 1:  # a fork would copy a thread's locks, not the thread
        reason = f"{threading.active_count()} threads after the imports: a fork is unsafe"
        _send(sock, {"ready": False, "reason": reason})
        return 1
    if "--cuda" in args[1:] and (unfit := _cuda_unfit(compiled=compiled)) is not None:
        _send(sock, {"ready": False, "reason": unfit})
        return 1
    _send(sock, {"ready": True})
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(sock, _MAX_MESSAGE, 3)
        except OSError:
            _end()
        if not data:  # the parent closed the socket, or died
            _end()
        message = json.loads(data)
        try:
            reply = (
                _spawn(sock, env, fds, ignored=message.get("ignored", []))
                if message["op"] == "spawn"
                else _poll(int(message["pid"]))
            )
        except OSError as exc:
            reply = {"error": f"{message['op']}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        _send(sock, reply)


def _cuda_unfit(
    probe: Callable[[], None] | None = None,
    *,
    compiled: bool = False,
    timeout_s: float = CUDA_CHECK_TIMEOUT_S,
) -> str | None:
    """Why this process cannot fork CUDA trials, or None: CUDA must be untouched here (a
    driver initialised before a fork cannot serve the forked process), and a process
    forked from here must start CUDA and run a kernel (``probe``; by default
    ``_run_a_kernel``, compiled for a zygote of compiled trials), as each trial will."""
    import torch

    if torch.cuda.is_initialized() or _driver_loaded(_own_maps()):
        return "the imports started CUDA here: a forked trial could not use it"
    probe = probe or functools.partial(_run_a_kernel, "cuda", compiled=compiled)
    failure = _in_a_fork(probe, timeout_s=timeout_s)
    return None if failure is None else f"a forked process could not use CUDA: {failure}"


def _driver_loaded(maps: str) -> bool:
    """Whether the CUDA driver's library is mapped in a process (its /proc/PID/maps):
    torch loads it at CUDA's first use, never at its import."""
    return any(
        line.rsplit("/", 1)[-1].startswith("libcuda.so")
        for line in maps.splitlines()
        if "/" in line
    )


def _own_maps() -> str:
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def _run_a_kernel(device: str, *, compiled: bool) -> None:
    """What a trial does first, in little: put a tensor on ``device`` and run a kernel on
    it; ``compiled``, one that Inductor generated (on a GPU, Triton's compiler and
    launcher, which a fork must be able to use too)."""
    import torch

    step = torch.compile(_double_plus_one) if compiled else _double_plus_one
    total = float(step(torch.ones(8, device=device)).sum())
    if total != 24.0:
        raise RuntimeError(f"a kernel on {device} gave {total} for 24")


def _double_plus_one(x: Any) -> Any:
    return x * 2 + 1


def _in_a_fork(probe: Callable[[], None], *, timeout_s: float) -> str | None:
    """Run ``probe`` in a process forked from this one; None if it returned, else why
    not (its exception, its exit, or the time it took)."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            probe()
            code = 0
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.write(write_fd, f"{type(exc).__name__}: {exc}".encode()[:2000])
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        deadline = time.monotonic() + timeout_s
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return f"it did not finish in {timeout_s:g} s"
            time.sleep(_POLL_S)
        said = os.read(read_fd, 4000).decode(errors="replace").strip()
    finally:
        os.close(read_fd)
    code = os.waitstatus_to_exitcode(done[1])
    if code == 0:
        return None
    return said.splitlines()[0] if said else f"it ended with exit status {code}"


def _end() -> NoReturn:
    """Exit without the interpreter's teardown: the zygote holds nothing to save, and
    tearing down torch took 0.6 s (0.8 s with Inductor) per zygote at the end of every
    search (2-core Xeon), past the search's time limit."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a parent gone: the next receive ends the loop
        sock.sendall(json.dumps(message).encode())


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap_orphaned_trial(pid: int) -> int | None:
    """The exit status of a trial whose zygote is gone, None while it runs. It came to
    this process (a subreaper while a burst runs), which reaps it; else init did."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # init's: it reaps it, and the status is lost
        return None if _running(pid) else LOST_STATUS
    return os.waitstatus_to_exitcode(status) if done else None


def _reap(pids: list[int]) -> None:
    """Reap the ended forks of a zygote that came to this process (others are init's)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            deadline = time.monotonic() + 1.0
            while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                time.sleep(_POLL_S)


def _spawn(
    sock: socket.socket, env: dict[str, str], fds: list[int], *, ignored: list[int]
) -> dict[str, Any]:
    """Fork the trial, ignoring the stop signals in ``ignored`` and heeding the others;
    answer once it leads a session of its own (the parent may signal its group as soon
    as it has the pid)."""
    request_fd, write_fd, log_fd = fds
    ready_read, ready_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the trial
        code = 1
        try:
            os.close(ready_read)
            _take_stop_signals(ignored)
            os.setsid()
            os.close(ready_write)
            sock.close()
            _become_trial(env, request_fd=request_fd, write_fd=write_fd, log_fd=log_fd)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(ready_write)
    os.read(ready_read, 1)  # end of file: the trial's setsid is done (or it died)
    os.close(ready_read)
    return {"pid": pid}


def _take_stop_signals(ignored: list[int]) -> None:
    """The stop signals as a fresh interpreter started by the search now would have them:
    those the search ignores, ignored; the others at Python's start-up default (SIGINT
    raises KeyboardInterrupt), for the trial's own handlers to replace."""
    for sig in STOP_SIGNALS:
        if int(sig) in ignored:
            signal.signal(sig, signal.SIG_IGN)
        elif sig == signal.SIGINT:
            signal.signal(sig, signal.default_int_handler)
        else:
            signal.signal(sig, signal.SIG_DFL)


def _become_trial(env: dict[str, str], *, request_fd: int, write_fd: int, log_fd: int) -> None:
    """In the forked process: what ``python -m autotune.burst.child`` would have been
    started with (its environment, its descriptors), then the trial itself, which takes
    its TMPDIR from that environment first (``trust_tmpdir``)."""
    import faulthandler

    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for fd in (devnull, log_fd):
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    from autotune.burst.child import main as trial_main

    trial_main([f"fd:{request_fd}", str(write_fd)])  # ends the process


def _poll(pid: int) -> dict[str, Any]:
    done, status = os.waitpid(pid, os.WNOHANG)
    return {"returncode": os.waitstatus_to_exitcode(status) if done else None}


if __name__ == "__main__":
    sys.exit(main())
