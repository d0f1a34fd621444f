"""Which signals stop a run, and how DataLoader workers leave them to the main process.

The trainer stops cleanly (after the step, with a checkpoint) on each of
:data:`STOP_SIGNALS`; the burst and the trainer's DataLoader workers run
:func:`ignore_stop_signals` (through ``data.loader_kwargs``), so a signal sent to the whole
process group reaches only the process that knows how to stop. :class:`HeldStops` keeps a
stop signal out of Optuna's bookkeeping between trials, and :func:`stops_held` out of each
call to a study's storage.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "PR_SET_PDEATHSIG",
    "STOP_SIGNALS",
    "HeldStops",
    "StopSignal",
    "end_orphan_watch",
    "how_stopped",
    "ignore_stop_signals",
    "prctl",
    "stop_signals_raise",
    "stop_when_orphaned",
    "stops_held",
    "time_bound",
]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def ignore_stop_signals(_worker_id: int) -> None:
    """A DataLoader worker leaves Ctrl-C, SIGTERM and SIGHUP to the main process.

    ``timeout``, Slurm, systemd and a terminal send them to the whole process group. A
    worker that died of one made PyTorch raise "DataLoader worker is killed by signal" in
    the middle of a step, instead of the main process stopping cleanly after the step (and
    saving a checkpoint), then shutting its workers down. SIGINT and SIGHUP are ignored.
    SIGTERM is also what the main process's own clean-up sends its workers
    (``Process.terminate``), so a worker keeps obeying that one: its SIGTERM is taken by a
    thread that ends the worker when the parent sent it and ignores it otherwise. A
    worker still ends with its parent (PyTorch's watchdog) and with SIGKILL.
    """
    for sig in STOP_SIGNALS:
        if sig != signal.SIGTERM:
            signal.signal(sig, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):  # not on macOS: SIGTERM keeps its default
        return
    parent = os.getppid()
    # Blocked here, before any other thread exists, so every thread of the worker inherits
    # it and a SIGTERM waits for the watcher instead of ending the process.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def watch() -> None:
        while True:
            info = signal.sigwaitinfo({signal.SIGTERM})
            if info.si_pid == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="autotune-sigterm", daemon=True).start()


class HeldStops:
    """Stop signals held while a library's bookkeeping runs, let through in our own code.

    Optuna's ``study.optimize`` records a trial's outcome after the objective returns; a
    ``KeyboardInterrupt`` raised there (Ctrl-C, or the CLI's handler for SIGTERM and
    SIGHUP) escapes its ``except Exception`` and its ``finally`` then fails on a name it
    never set (``UnboundLocalError``: a traceback instead of a clean stop). Inside
    ``with HeldStops() as held:``, a stop signal whose handler is Python's own (Ctrl-C's
    ``default_int_handler``, the CLI's) is recorded instead of handled; inside
    ``held.released()`` (the objective), and at ``held.replay()`` (a callback after the
    outcome is stored), one recorded earlier is handled and later ones are handled at once,
    except inside ``held.holding()`` (a storage call: :func:`stops_held`).
    Leaving the block handles one still recorded, unless an exception is already on its
    way out. Signals whose handler is ``SIG_IGN`` or ``SIG_DFL`` are left alone; off the
    main thread nothing is held (Python runs handlers only there).
    """

    def __init__(self) -> None:
        self._handlers: dict[int, Callable[[int, FrameType | None], Any]] = {}
        self._pending: int | None = None
        self._open = False
        self._outer: HeldStops | None = None

    def __enter__(self) -> HeldStops:
        global _innermost
        if threading.current_thread() is threading.main_thread():
            try:
                for sig in STOP_SIGNALS:
                    handler = signal.getsignal(sig)
                    if callable(handler):
                        self._handlers[sig] = handler
                        signal.signal(sig, self._arrived)
            except BaseException:  # one came before its handler was swapped: as if not entered
                self._restore()
                self._handlers = {}
                raise
            self._outer, _innermost = _innermost, self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        global _innermost
        self._open = False
        if _innermost is self:
            _innermost = self._outer
        try:
            self._restore()
            if exc_type is None:
                self.replay()
        finally:
            self._handlers = {}

    def _restore(self) -> None:
        """The handlers found on entering, back; all of them even when one signal, already
        back with its handler, is handled (raises) in the middle."""
        try:
            for sig, handler in self._handlers.items():
                signal.signal(sig, handler)
        except BaseException:
            for sig, handler in self._handlers.items():
                signal.signal(sig, handler)
            raise

    def _arrived(self, signum: int, frame: FrameType | None) -> None:
        if self._open:
            self._handlers[signum](signum, frame)
        elif self._pending is None:
            self._pending = signum

    def replay(self, *_: object) -> None:
        """Handle a signal recorded while held (its handler raises, most often)."""
        signum, self._pending = self._pending, None
        if signum is not None:
            self._handlers[signum](signum, None)

    def let_through(self, func: Callable[[T], R]) -> Callable[[T], R]:
        """``func`` run with stop signals :meth:`released`."""

        def run(arg: T) -> R:
            with self.released():
                return func(arg)

        return run

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Stop signals handled as they come (one recorded before, first)."""
        self._open = True
        try:
            self.replay()
            yield
        finally:
            self._open = False

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Stop signals held for the block, even inside :meth:`released`; there, one that
        came is handled as the block ends, whether or not an exception is on its way out
        (a caller may catch a storage's error and go on: the stop must not be lost).
        Elsewhere it stays recorded for the next :meth:`replay`."""
        was_open, self._open = self._open, False  # one store: no signal lands half-way
        try:
            yield
        finally:
            self._open = was_open
            if was_open:
                self.replay()


_innermost: HeldStops | None = None  # the innermost HeldStops entered on the main thread


def stops_held(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` with stop signals held for the whole call and handled as soon as it ends,
    returned or raised: for a study storage's methods.

    A ``KeyboardInterrupt`` raised inside a SQLAlchemy session (in its flush, its commit,
    or the ``close`` Optuna runs after each) can leave the session of Optuna's RDB storage
    unusable ("Object <TrialModel> cannot be converted to 'persistent' state, as this
    identity map is no longer valid"), and the next write, the one that records the
    interrupted trial as failed, then fails: the search ended in "the study storage
    stopped taking writes" (exit 1) instead of a clean stop, its trial left RUNNING. Inside
    a :class:`HeldStops` the call is its :meth:`HeldStops.holding`; outside one, a
    :class:`HeldStops` of its own holds them. Calls nested in a held one, and calls off
    the main thread (a heartbeat), just run.
    """

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if threading.current_thread() is not threading.main_thread():
            return func(*args, **kwargs)
        held = _innermost
        if held is None:
            with HeldStops() as own, own.released(), own.holding():
                return func(*args, **kwargs)
        with held.holding():
            return func(*args, **kwargs)

    return run


def stop_when_orphaned(
    signum: int = signal.SIGTERM, *, parent: int | None = None, interval_s: float = 1.0
) -> None:
    """Send this process ``signum`` once, when its parent has died (its parent's process
    id is no longer ``parent``, by default the one it has now; at once where it already
    is not): a torchrun rank whose launcher was killed (``kill -9``, a second Ctrl-C
    during torchrun's wait for its ranks) stops as if the launcher had passed a stop
    on. torchrun starts its ranks in sessions of their own, so no signal meant for the
    launcher reaches them, and they trained on alone. A thread that looks every
    ``interval_s``, not ``PR_SET_PDEATHSIG``: that one fires once for each thread of a
    dying parent (the kernel hands the child from thread to thread as they exit), and a
    rank's second stop signal ends it at once, before its checkpoint."""
    global _orphan_watch
    expected = os.getppid() if parent is None else parent
    end_orphan_watch()  # one watch at a time: a run's own
    over = _orphan_watch = threading.Event()

    def watch() -> None:
        while os.getppid() == expected and not over.wait(interval_s):
            pass
        if not over.is_set():
            os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name="autotune-orphan", daemon=True).start()


_orphan_watch: threading.Event | None = None


def end_orphan_watch() -> None:
    """What ``stop_when_orphaned`` watched over is done (a rank's training loop): a
    parent's death sends nothing from now on. The rank finishes by itself (its last
    checkpoint, its summary), where that signal, come after the loop's handler, ended it
    on the spot (a rank orphaned a moment after the other, whose stop ended the loop)."""
    if _orphan_watch is not None:
        _orphan_watch.set()


# -- Linux's prctl ----------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal this process gets when its parent dies


def prctl(option: int, value: int) -> bool:
    """Linux's ``prctl(option, value)`` for this process; False where there is none or
    it failed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taking Ctrl-C's path: through the search (the running trial is
    marked failed, its burst's process group ended, the study left consistent), and out of
    a training step that a first stop signal could not end. The CLI exits with 128 plus
    its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def how_stopped(stop: KeyboardInterrupt) -> tuple[int, str]:
    """How a command that ``stop`` ended exits, as a shell would report it, and the line
    it says: 130 and "interrupted" for Ctrl-C, 128 + its number and "stopped by SIGTERM"
    for a ``StopSignal``."""
    if isinstance(stop, StopSignal):
        return 128 + stop.signum, f"stopped by {stop}"
    return 130, "interrupted"


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP (a scheduler, a closed terminal) raise ``StopSignal`` as
    Ctrl-C raises KeyboardInterrupt, so that a command's clean-up runs and the CLI says
    what stopped it (exit 128 + its number), where the default action ended the process
    without a word. A signal the parent ignored (``nohup``) stays ignored; off the main
    thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StopSignal(signum)

    sigs = [  # Ctrl-C raises by itself
        sig
        for sig in STOP_SIGNALS
        if sig != signal.SIGINT and signal.getsignal(sig) is not signal.SIG_IGN
    ]
    old = {sig: signal.signal(sig, handler) for sig in sigs}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def time_bound(seconds: float | None, error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise ``error()`` where what runs inside takes more than ``seconds`` (SIGALRM, in
    the main thread): a user's module that waits at import, in Python or in a sleep, is
    stopped; a C call that retries on EINTR is not. No bound without ``seconds``, off the
    main thread, or where the OS has no interval timer."""
    if (
        seconds is None
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expired(signum: int, frame: FrameType | None) -> None:
        raise error()

    previous = signal.signal(signal.SIGALRM, expired)
    try:  # armed inside: an alarm that fires at once still restores the handler
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
