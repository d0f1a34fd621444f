"""The clean stop of a training run: SIGINT, SIGTERM or SIGHUP finishes the current step.

``StopSignals`` records the first stop signal (``received``) for the loop to see; a second
stops at once: SIGINT as KeyboardInterrupt, SIGTERM or SIGHUP as ``StopSignal`` (a step
that hangs, in a user's ``forward``, ends only so, and a scheduler sends SIGTERM, not
Ctrl-C). A signal the parent had ignored stays ignored: ``nohup`` ignores SIGHUP so that
closing the terminal leaves the run alone, and a shell without job control starts
``cmd &`` with SIGINT ignored; Python honours both, so does the trainer. A signal mask is
inherited through fork and exec too: a parent that blocked a stop signal would leave it
pending for the whole run, so the handled ones are unblocked while the handlers are
installed, and the mask restored after.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from autotune.core.signals import STOP_SIGNALS, StopSignal

__all__ = ["REPEAT_S", "StopSignals"]

# A SIGTERM or SIGHUP this soon after the first is the same stop delivered twice (SLURM
# signals every process of a step, torchrun forwards to its ranks): the clean stop stands.
REPEAT_S = 1.0


class StopSignals:
    """The run's stop-signal handlers, installed by ``install`` and removed by ``restore``."""

    def __init__(self, message: Callable[[str], None]) -> None:
        self.message = message
        self.received: int | None = None  # the first stop signal that arrived
        self._first_at = 0.0  # when it arrived (time.monotonic)
        self._old_mask: set[int | signal.Signals] | None = None
        self._old_handlers: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second stop: at once, out of the step it is in
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            if time.monotonic() - self._first_at < REPEAT_S:
                return  # one stop delivered twice (a scheduler's and a launcher's copy)
            raise StopSignal(signum)
        self.received = signum
        self._first_at = time.monotonic()
        name = signal.Signals(signum).name
        again = (
            "press Ctrl-C again to stop at once"
            if signum == signal.SIGINT
            else f"a second {name} stops at once"
        )
        self.message(f"{name}: stopping after this step and saving a checkpoint ({again})")

    def install(self) -> None:
        """Handle SIGINT, SIGTERM and SIGHUP (those not ignored) with the clean stop and
        unblock them; from the main thread only (Python's rule for handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return
        handled = [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
        for sig in handled:  # SIGINT, SIGTERM and SIGHUP: the same clean stop
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if hasattr(signal, "pthread_sigmask") and handled:
            self._old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)

    def restore(self) -> None:
        """The handlers and the signal mask as they were before ``install``."""
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        if self._old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)
            self._old_mask = None
