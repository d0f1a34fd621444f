"""The inside of a burst: the code that runs in the trial's own process.

Started by ``autotune.burst.supervisor.run_burst`` as
``python -m autotune.burst.child REQUEST FD``: ``REQUEST`` is a ``BurstRequest`` written
by the parent (``autotune.burst.request``: the spec's source or the pickled spec, the
config, the step counts, the budget), inherited as ``fd:N`` (this process then makes its
own folder) or, under torchrun, a path in the folder the parent made; ``FD`` a pipe
(``autotune.burst.channel``) on which this process writes one JSON object per line:

    {"type": "stage", "name": "building the model"}
    {"type": "context", "bytes": 5.2e8, "method": "nvml-process"}           (CUDA only)
    {"type": "ready", "threads": N}                    (the first step starts now; torch's
                                                        intra-op threads)
    {"type": "warmup" | "step", "index": 0, "time_s": 0.12, "loss": 2.3, "peak_bytes": ...}
    {"type": "result", "status": "ok" | "oom" | "nan" | "error", "reason": "...", ...}

The parent classifies the outcome from these messages alone: a process that dies without
a ``result`` crashed, one that is still running at the deadline timed out. Nothing here
prints to stdout or stderr on purpose; both go to a log the parent keeps for context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.burst.channel import ParentGone, connect
from autotune.burst.process import trust_tmpdir
from autotune.burst.request import read_request
from autotune.burst.sweeper import FOLDER_PREFIX
from autotune.burst.trial import Trial, classify_exception
from autotune.core.signals import STOP_SIGNALS

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m autotune.burst.child fd:N|REQUEST_PATH RESULT_FD", file=sys.stderr)
        return 2
    trust_tmpdir()  # before anything asks for a temporary file
    parent = int(os.environ.get("AUTOTUNE_BURST_PARENT", "0") or 0) or os.getppid()
    own_folder = args[0].startswith("fd:")
    workdir = _Workdir(None if own_folder else Path(args[0]).parent)
    _follow_parent(parent, workdir=workdir)
    if own_folder:
        workdir.make()
    code = 0
    try:
        _run(args, workdir)
    except ParentGone:  # a parent killed outright broke the channel: nobody to tell
        code = 3
    finally:  # whatever way the trial ended, its folder goes with it
        workdir.remove()
    # Done: skip the interpreter's teardown (seconds with torch loaded). The parent ends
    # whatever is left of the group (DataLoader workers of an early return).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(args: list[str], workdir: _Workdir) -> None:
    """The trial, from its first message to its result (or its end as a stop signal)."""
    channel = connect(args[1])
    _no_core_dumps()
    _handle_stop_signals()
    channel.send("stage", name="importing")
    trial: Trial | None = None
    outcome: dict[str, Any] = {}
    try:
        try:
            request = read_request(args[0])
            if request.workdir is None:  # a one-process trial: the folder it made
                request = dataclasses.replace(request, workdir=str(workdir.path))
            trial = Trial(request, channel)
            outcome = trial.run()
        except ParentGone:
            raise
        except BaseException as exc:  # the parent must hear about every way this can end
            if not _stopped:
                outcome = _failure(exc, trial)
    except _Stopped:  # the signal arrived while a failure was being described
        pass
    if _stopped:  # whatever was raised since is the stop's doing, not the model's
        workdir.remove()
        _end_as_signal(_stopped[0])
    channel.send("result", **outcome)


def _failure(exc: BaseException, trial: Trial | None) -> dict[str, Any]:
    """The ``result`` fields of a trial that raised ``exc``."""
    status, reason = classify_exception(exc)
    stage = trial.stage if trial is not None else "starting"
    reason = f"{reason} (during {stage})"
    if trial is not None:
        return trial.result(status, reason)
    return {"status": status, "reason": reason, "stage": stage}


class _Stopped(BaseException):
    """Raised in the main thread by the first stop signal: the trial was asked to stop."""


_stopped: list[int] = []  # the stop signal that arrived, if one did


def _handle_stop_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP (those not ignored) stop the trial: the first is recorded
    and raised as ``_Stopped``. A signal sent to the trial's group reaches its helpers too
    (Inductor's compile workers), and the step then fails of their death: whatever is
    raised after a stop is the stop, and the trial ends as that signal (``_end_as_signal``),
    never as an error of the model."""

    def on_signal(signum: int, _frame: Any) -> None:
        if not _stopped:
            _stopped.append(signum)
            raise _Stopped(signum)

    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, on_signal)


def _end_as_signal(signum: int) -> None:
    """End this process by ``signum`` itself, as it would have without a handler: the
    parent reads how the trial ended from its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # pragma: no cover - the signal ends the process first


class _Workdir:
    """The trial's temporary folder and who removes it. A one-process trial makes it
    (``make``, named after this process) and removes it as it ends; under torchrun the
    parent made it and removes it. When the parent dies, the trial removes it either way
    (``abandon``). The lock keeps making and abandoning apart: no folder is made after the
    parent's death was handled, and none is made without a process that will remove it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lock = threading.Lock()

    def make(self) -> None:
        from autotune.burst.process import make_workdir, use_as_tmpdir

        with self.lock:
            self.path = make_workdir()
            use_as_tmpdir(self.path)  # DataLoader workers' sockets and folders go in it

    def remove(self) -> None:
        """After the result, or at a stop: when this trial is one process (the parent
        needs nothing more from the folder). Under torchrun (a rank is not its group's
        leader) the parent removes it."""
        if os.getpgrp() == os.getpid():
            with self.lock:
                self._remove()

    def abandon(self, *, sweep_group: int | None = None) -> None:
        """The parent is gone: remove the folder, and hold the lock until this process
        exits so that none is made after. With ``sweep_group`` (this trial's own group),
        first have the folder removed again once that group has ended: the main thread,
        and a worker it started meanwhile, may still write in it (``autotune.burst.sweeper``).
        The sweeper starts before the removal, whatever the folder looks like then: the
        main thread may make it again a moment later, or fail on the removal and end this
        process before this thread gets further."""
        self.lock.acquire()
        if sweep_group is not None and self.path is not None:
            from autotune.burst.sweeper import start_sweeper

            with contextlib.suppress(OSError):  # no process to spare: the search's sweep stays
                start_sweeper(sweep_group, self.path)
        self._remove()

    def _remove(self) -> None:
        import shutil

        if self.path is None or not self.path.name.startswith(FOLDER_PREFIX):
            return  # not made yet, or not run_burst's (never a user's folder)
        for _ in range(3):  # this process's main thread may still be writing in it
            shutil.rmtree(self.path, ignore_errors=True)
            if not self.path.exists():
                break
            time.sleep(0.05)


def _follow_parent(ppid: int, *, workdir: _Workdir) -> None:
    """End this trial's whole process group if the parent dies (it can no longer time us
    out or read the result), noticed at once on a daemon thread (``_wait_while``), and
    remove the trial's folder, which a parent killed outright cannot. ``ppid`` is the
    parent's pid as the parent said it (``AUTOTUNE_BURST_PARENT``): a parent killed while
    this process started is already gone by now, and ``os.getppid()`` would name its
    adopter."""
    alive = _parent_check(ppid)

    def watch() -> None:
        _wait_while(alive, ppid)
        import psutil

        for child in psutil.Process().children(recursive=True):  # DataLoader workers: none
            with contextlib.suppress(psutil.Error):  # may write in the folder as it goes
                child.kill()
        own_group = os.getpgrp() == os.getpid()  # run_burst starts us in one
        workdir.abandon(sweep_group=os.getpgrp() if own_group else None)
        if own_group:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def _wait_while(alive: Callable[[], bool], ppid: int) -> None:
    """Return once the parent is gone: at its exit through a pidfd (Linux 5.3+; the
    kernel says when the process ends), else polled twice a second."""
    import select

    try:
        fd = os.pidfd_open(ppid)
    except (AttributeError, OSError):  # no pidfd here, or the parent is already gone
        fd = -1
    if fd >= 0 and alive():  # the pidfd is of the parent itself, not of a reused pid
        select.select([fd], [], [])
        return
    while alive():
        time.sleep(0.5)


def _parent_check(ppid: int) -> Callable[[], bool]:
    """Whether the search process ``ppid`` still runs: our parent, or under torchrun (the
    launcher is our parent) the same process that was there when we started."""
    if os.getppid() == ppid:
        return lambda: os.getppid() == ppid
    import psutil

    try:
        created = psutil.Process(ppid).create_time()
    except psutil.Error:
        return lambda: False

    def alive() -> bool:
        try:
            return bool(psutil.Process(ppid).create_time() == created)
        except psutil.Error:
            return False

    return alive


def _no_core_dumps() -> None:
    """A crashing trial must not write a core file the size of its memory."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())
